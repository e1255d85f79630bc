// forge service-keys create | list | update | revoke
import { create } from "@bufbuild/protobuf";
import {
  CreateServiceKeyResponseSchema,
  ListServiceKeysResponseSchema,
  RevokeServiceKeyResponseSchema,
  ServiceKeyLimitsSchema,
  UpdateServiceKeyLimitsResponseSchema,
  type ServiceKey,
  type ServiceKeyLimits,
} from "../../gen/proto/modelforge/admin/v1/admin_pb.js";
import {
  command,
  durationOption,
  idArg,
  intOption,
  type OptionValues,
  repeatableOption,
  requiredOption,
  switchOption,
  textOption,
  UsageError,
  valueOption,
  type Group,
} from "../args.js";
import { dateOf, fields, formatAge, formatTimeAndAge, shownOnce, table } from "../format.js";
import { printReply } from "../output.js";
import { pagedListCommand } from "../list.js";

const stateOf = (k: ServiceKey, now: Date) =>
  k.revokedAt !== undefined ? "revoked" : k.expiresAt !== undefined && dateOf(k.expiresAt)! <= now ? "expired" : "active";

const limitOptions = {
  rpm: valueOption("N", "requests per minute (0: no limit)"),
  tpm: valueOption("N", "prompt and completion tokens per minute (0: no limit)"),
  "daily-tokens": valueOption("N", "tokens per UTC day (0: no limit)"),
  "monthly-tokens": valueOption("N", "tokens per UTC month (0: no limit)"),
};

/** The limits given on the command line; a limit not given is 0, none. */
function limitsOf(values: OptionValues): ServiceKeyLimits {
  return create(ServiceKeyLimitsSchema, {
    requestsPerMinute: intOption(values, "rpm", 0, 1_000_000, 0),
    tokensPerMinute: intOption(values, "tpm", 0, 1_000_000_000, 0),
    dailyTokens: BigInt(intOption(values, "daily-tokens", 0, Number.MAX_SAFE_INTEGER, 0)),
    monthlyTokens: BigInt(intOption(values, "monthly-tokens", 0, Number.MAX_SAFE_INTEGER, 0)),
  });
}

/** "60 rpm, 10000 tpm" or "none". Pure. */
function formatLimits(l: ServiceKeyLimits | undefined): string {
  if (l === undefined) return "none";
  const parts = [
    l.requestsPerMinute ? `${l.requestsPerMinute} rpm` : "",
    l.tokensPerMinute ? `${l.tokensPerMinute} tpm` : "",
    l.dailyTokens ? `${l.dailyTokens}/day` : "",
    l.monthlyTokens ? `${l.monthlyTokens}/month` : "",
  ].filter(Boolean);
  return parts.length === 0 ? "none" : parts.join(", ");
}

const createCommand = command("create", "Create a service key for DeploymentService and print it once", {
  options: {
    name: valueOption("NAME", "a display name (a-z, 0-9, '.', '_', '-')"),
    deployment: repeatableOption("NAME", "a deployment the key may list and invoke; repeatable, at least one"),
    ttl: valueOption("DURATION", "how long the key works, e.g. 30d (default: until revoked)"),
    ...limitOptions,
  },
  notes:
    'The key is printed once and is stored by the server only as a hash: it cannot be shown again.\nService clients send it as "Authorization: Bearer <key>".',
  async run(ctx, values) {
    const name = requiredOption(values, "name");
    const deployments = (values.deployment as string[] | undefined) ?? [];
    if (deployments.length === 0) throw new UsageError("name at least one --deployment");
    const res = await ctx.client().createServiceKey({ name, deployments, ttl: durationOption(values, "ttl"), limits: limitsOf(values) });
    return printReply(
      ctx,
      CreateServiceKeyResponseSchema,
      res,
      ({ key: k, secret }) =>
        shownOnce("Service key", secret) +
        fields(
          [
            ["Key ID", k?.id],
            ["Name", k?.name],
            ["Deployments", k?.deployments.join(", ")],
            ["Expires", k?.expiresAt ? formatTimeAndAge(dateOf(k.expiresAt), ctx.now()) : "never"],
            ["Limits", formatLimits(k?.limits)],
          ],
          "",
        ),
    );
  },
});

/** The key table. Pure. */
function keyTable(keys: ServiceKey[], now: Date): string {
  return table(
    ["ID", "STATE", "NAME", "PREFIX", "DEPLOYMENTS", "LIMITS", "OWNER", "CREATED", "EXPIRES", "LAST USED"],
    keys.map((k) => [
      k.id,
      stateOf(k, now),
      k.name,
      k.prefix,
      k.deployments.join(","),
      formatLimits(k.limits),
      k.owner?.email || "-",
      formatAge(dateOf(k.createdAt), now),
      k.expiresAt ? formatAge(dateOf(k.expiresAt), now) : "never",
      formatAge(dateOf(k.lastUsedAt), now),
    ]),
  );
}

const listCommand = pagedListCommand("List service keys (never their secrets), newest first", {
  options: { all: switchOption("include revoked keys"), owner: valueOption("USER", "only keys made by this user (email or id)") },
  filter: (values) => ({ includeRevoked: values.all === true, owner: textOption(values, "owner") }),
  schema: ListServiceKeysResponseSchema,
  fetch: (client, page, filter) => client.listServiceKeys({ ...page, ...filter }),
  empty: "No service keys.\n",
  table: keyTable,
});

const updateCommand = command("update ID", "Set a service key's limits (every limit not given is removed)", {
  options: limitOptions,
  async run(ctx, values, positionals) {
    const id = idArg(positionals, "service key ID");
    const res = await ctx.client().updateServiceKeyLimits({ id, limits: limitsOf(values) });
    return printReply(
      ctx,
      UpdateServiceKeyLimitsResponseSchema,
      res,
      ({ key }) => `Service key ${id}: limits ${formatLimits(key?.limits)}.\n`,
    );
  },
});

const revokeCommand = command("revoke ID", "Revoke a service key at once", {
  options: { reason: valueOption("TEXT", "why, for the audit log") },
  async run(ctx, values, positionals) {
    const id = idArg(positionals, "service key ID");
    const res = await ctx.client().revokeServiceKey({ id, reason: textOption(values, "reason") });
    return printReply(ctx, RevokeServiceKeyResponseSchema, res, () => `Service key ${id} is revoked.\n`);
  },
});

export const serviceKeysGroup: Group = {
  name: "service-keys",
  summary: "Credentials service clients call DeploymentService with",
  topic: "service keys",
  commands: [createCommand, listCommand, updateCommand, revokeCommand],
};
