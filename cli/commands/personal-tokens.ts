// forge tokens personal create | list | revoke: the caller's own tokens for scripts and CI.
import {
  CreatePersonalTokenResponseSchema,
  ListPersonalTokensResponseSchema,
  OperatorRole,
  RevokePersonalTokenResponseSchema,
  type PersonalToken,
} from "../../gen/proto/modelforge/admin/v1/admin_pb.js";
import {
  durationOption,
  requiredOption,
  switchOption,
  textOption,
  UsageError,
  valueOption,
  type Command,
  type Context,
  type OptionValues,
} from "../args.js";
import { dateOf, fields, formatAge, formatTimeAndAge, shownOnce, table } from "../format.js";
import { printList, printReply } from "../output.js";
import { roleName } from "./sign-in.js";

const roles: Record<string, OperatorRole> = { viewer: OperatorRole.READ_ONLY, operator: OperatorRole.OPERATOR, admin: OperatorRole.ADMIN };

function roleOption(values: OptionValues): OperatorRole {
  const text = textOption(values, "role");
  if (text === "") return OperatorRole.UNSPECIFIED;
  const role = roles[text];
  if (role === undefined) throw new UsageError(`--role: expected viewer, operator or admin, got "${text}"`);
  return role;
}

/** The token table. Pure. */
function personalTokenTable(tokens: PersonalToken[], now: Date): string {
  const state = (t: PersonalToken) =>
    t.revokedAt ? "revoked" : (dateOf(t.expiresAt)?.getTime() ?? 0) <= now.getTime() ? "expired" : "active";
  return table(
    ["ID", "NAME", "STATE", "ROLE", "PREFIX", "CREATED", "EXPIRES", "LAST USED"],
    tokens.map((t) => [
      t.id,
      t.name,
      state(t),
      roleName(t.role),
      t.prefix,
      formatAge(dateOf(t.createdAt), now),
      formatAge(dateOf(t.expiresAt), now),
      formatAge(dateOf(t.lastUsedAt), now),
    ]),
  );
}

async function create(ctx: Context, values: OptionValues): Promise<number> {
  const res = await ctx
    .client()
    .createPersonalToken({ name: requiredOption(values, "name"), ttl: durationOption(values, "ttl"), role: roleOption(values) });
  return printReply(ctx, CreatePersonalTokenResponseSchema, res, ({ token, personalToken: t }) => {
    return (
      shownOnce("Personal access token", token) +
      fields(
        [
          ["Token ID", t?.id],
          ["Role", t ? roleName(t.role) : undefined],
          ["Expires", formatTimeAndAge(dateOf(t?.expiresAt), ctx.now())],
        ],
        "",
      ) +
      '\nUse it as MODELFORGE_TOKEN for forge, or send it as "Authorization: Bearer <token>".\n'
    );
  });
}

async function list(ctx: Context, values: OptionValues): Promise<number> {
  const res = await ctx.client().listPersonalTokens({ includeRevoked: values.all === true });
  printList(ctx, ListPersonalTokensResponseSchema, res, {
    items: res.personalTokens,
    empty: "No personal tokens.\n",
    table: (all) => personalTokenTable(all, ctx.now()),
  });
  return 0;
}

async function revoke(ctx: Context, id: string | undefined): Promise<number> {
  if (id === undefined || id.trim() === "") throw new UsageError("missing token ID");
  const res = await ctx.client().revokePersonalToken({ id: id.trim() });
  return printReply(ctx, RevokePersonalTokenResponseSchema, res, ({ personalToken: t }) => `Personal token ${t?.name ?? id} revoked.\n`);
}

export const personalTokensCommand: Command = {
  name: "personal",
  summary: "Your personal access tokens for scripts and CI: create, list, revoke",
  args: "create|list|revoke [ID]",
  positionals: { min: 1, max: 2 },
  options: {
    name: valueOption("NAME", "create: the token's name (letters, digits, '.', '_', '-')"),
    ttl: valueOption("DURATION", "create: how long it lives, e.g. 30d (default 30d, at most 365d)"),
    role: valueOption("ROLE", "create: viewer, operator or admin; never above your own (default your own)"),
    all: switchOption("list: include revoked and expired tokens"),
  },
  notes: "A token is printed once and stored by the server only as a hash. It dies with its user.",
  async run(ctx, values, positionals) {
    const [verb, id] = positionals;
    if (verb === "create") return create(ctx, values);
    if (verb === "list") return list(ctx, values);
    if (verb === "revoke") return revoke(ctx, id);
    throw new UsageError(`unknown command "tokens personal ${verb}" (create, list or revoke)`);
  },
};
