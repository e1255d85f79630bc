// forge service-keys create | list | revoke
import { create } from "@bufbuild/protobuf";
import { durationFromMs } from "@bufbuild/protobuf/wkt";
import {
  CreateServiceKeyResponseSchema,
  ListServiceKeysResponseSchema,
  RevokeServiceKeyResponseSchema,
  type ServiceKey,
} from "../../gen/proto/modelforge/admin/v1/admin_pb.js";
import { idArg, parseDurationFlag, textOption, UsageError, type Command, type Group } from "../args.js";
import { clean, dateOf, fields, formatAge, formatTimeAndAge, table } from "../format.js";
import { printJson } from "../output.js";

const stateOf = (k: ServiceKey, now: Date) =>
  k.revokedAt !== undefined ? "revoked" : k.expiresAt !== undefined && dateOf(k.expiresAt)! <= now ? "expired" : "active";

const createCommand: Command = {
  name: "create",
  summary: "Create a service key for DeploymentService and print it once",
  positionals: { min: 0, max: 0 },
  options: {
    name: { type: "string", value: "NAME", description: "a display name (a-z, 0-9, '.', '_', '-')" },
    deployment: {
      type: "string",
      multiple: true,
      value: "NAME",
      description: "a deployment the key may list and invoke; repeatable, at least one",
    },
    ttl: { type: "string", value: "DURATION", description: "how long the key works, e.g. 30d (default: until revoked)" },
  },
  notes:
    'The key is printed once and is stored by the server only as a hash: it cannot be shown again.\nService clients send it as "Authorization: Bearer <key>".',
  async run(ctx, values) {
    const name = textOption(values, "name");
    const deployments = (values.deployment as string[] | undefined) ?? [];
    if (name === "") throw new UsageError("--name is required");
    if (deployments.length === 0) throw new UsageError("name at least one --deployment");
    const ttl = values.ttl === undefined ? undefined : durationFromMs(parseDurationFlag(values.ttl as string, "--ttl"));
    const res = await ctx.client().createServiceKey({ name, deployments, ttl });
    if (ctx.json) {
      printJson(ctx, CreateServiceKeyResponseSchema, res);
      return 0;
    }
    const k = res.key;
    ctx.out(
      "Service key (shown once; it cannot be retrieved again):\n\n" +
        `  ${clean(res.secret)}\n\n` +
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
    return 0;
  },
};

const listCommand: Command = {
  name: "list",
  summary: "List service keys (never their secrets), newest first",
  positionals: { min: 0, max: 0 },
  options: { all: { type: "boolean", description: "include revoked keys" } },
  async run(ctx, values) {
    const keys: ServiceKey[] = [];
    let pageToken = "";
    do {
      const page = await ctx.client().listServiceKeys({ pageSize: 1000, pageToken, includeRevoked: values.all === true });
      keys.push(...page.keys);
      pageToken = page.nextPageToken;
    } while (pageToken !== "");
    if (ctx.json) {
      printJson(ctx, ListServiceKeysResponseSchema, create(ListServiceKeysResponseSchema, { keys }));
      return 0;
    }
    if (keys.length === 0) {
      ctx.out("No service keys.\n");
      return 0;
    }
    const now = ctx.now();
    ctx.out(
      table(
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
      ),
    );
    return 0;
  },
};

const revokeCommand: Command = {
  name: "revoke",
  summary: "Revoke a service key at once",
  args: "ID",
  positionals: { min: 1, max: 1 },
  options: { reason: { type: "string", value: "TEXT", description: "why, for the audit log" } },
  async run(ctx, values, positionals) {
    const id = idArg(positionals, "service key ID");
    const res = await ctx.client().revokeServiceKey({ id, reason: textOption(values, "reason") });
    if (ctx.json) {
      printJson(ctx, RevokeServiceKeyResponseSchema, res);
      return 0;
    }
    ctx.out(`Service key ${id} is revoked.\n`);
    return 0;
  },
};

export const serviceKeysGroup: Group = {
  name: "service-keys",
  summary: "Credentials service clients call DeploymentService with",
  commands: [createCommand, listCommand, revokeCommand],
};
