// forge service-keys create | list | revoke
import {
  CreateServiceKeyResponseSchema,
  ListServiceKeysResponseSchema,
  RevokeServiceKeyResponseSchema,
  type ServiceKey,
} from "../../gen/proto/modelforge/admin/v1/admin_pb.js";
import {
  command,
  durationOption,
  idArg,
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

const createCommand = command("create", "Create a service key for DeploymentService and print it once", {
  options: {
    name: valueOption("NAME", "a display name (a-z, 0-9, '.', '_', '-')"),
    deployment: repeatableOption("NAME", "a deployment the key may list and invoke; repeatable, at least one"),
    ttl: valueOption("DURATION", "how long the key works, e.g. 30d (default: until revoked)"),
  },
  notes:
    'The key is printed once and is stored by the server only as a hash: it cannot be shown again.\nService clients send it as "Authorization: Bearer <key>".',
  async run(ctx, values) {
    const name = requiredOption(values, "name");
    const deployments = (values.deployment as string[] | undefined) ?? [];
    if (deployments.length === 0) throw new UsageError("name at least one --deployment");
    const res = await ctx.client().createServiceKey({ name, deployments, ttl: durationOption(values, "ttl") });
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
          ],
          "",
        ),
    );
  },
});

/** The key table. Pure. */
function keyTable(keys: ServiceKey[], now: Date): string {
  return table(
    ["ID", "STATE", "NAME", "PREFIX", "DEPLOYMENTS", "CREATED", "EXPIRES"],
    keys.map((k) => [
      k.id,
      stateOf(k, now),
      k.name,
      k.prefix,
      k.deployments.join(","),
      formatAge(dateOf(k.createdAt), now),
      k.expiresAt ? formatAge(dateOf(k.expiresAt), now) : "never",
    ]),
  );
}

const listCommand = pagedListCommand("List service keys (never their secrets), newest first", {
  options: { all: switchOption("include revoked keys") },
  filter: (values) => values.all === true,
  schema: ListServiceKeysResponseSchema,
  fetch: (client, page, includeRevoked) => client.listServiceKeys({ ...page, includeRevoked }),
  empty: "No service keys.\n",
  table: keyTable,
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
  commands: [createCommand, listCommand, revokeCommand],
};
