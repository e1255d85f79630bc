// forge tokens create | list | revoke (enrollment tokens), and tokens personal (./personal-tokens.ts)
import {
  CreateEnrollmentTokenResponseSchema,
  EnrollmentTokenState,
  ListEnrollmentTokensResponseSchema,
  RevokeEnrollmentTokenResponseSchema,
  type EnrollmentToken,
} from "../../gen/proto/modelforge/admin/v1/admin_pb.js";
import { command, durationOption, idArg, parseLabels, repeatableOption, textOption, valueOption, type Group } from "../args.js";
import { clean, dateOf, enumName, fields, formatAge, formatLabels, formatTimeAndAge, shownOnce, table } from "../format.js";
import { printReply } from "../output.js";
import { pagedListCommand } from "../list.js";
import { personalTokensCommand } from "./personal-tokens.js";

const createCommand = command("create", "Create a one-time enrollment token and print its join command", {
  options: {
    name: valueOption("NAME", "name the enrolling node gets"),
    node: valueOption("NODE_ID", "re-enroll this existing node (revokes its active credential now)"),
    ttl: valueOption("DURATION", "how long the token is valid, e.g. 10m, 2h (server default 10m, at most 7d)"),
    label: repeatableOption("KEY=VALUE", "a label the node gets; repeatable"),
  },
  notes: "The token is printed once and is stored by the server only as a hash: it cannot be shown again.",
  async run(ctx, values) {
    const res = await ctx.client().createEnrollmentToken({
      nodeName: textOption(values, "name"),
      nodeId: textOption(values, "node"),
      ttl: durationOption(values, "ttl"),
      labels: parseLabels(values.label as string[] | undefined),
    });
    return printReply(ctx, CreateEnrollmentTokenResponseSchema, res, ({ enrollmentToken: t, token, joinCommand }) => {
      const now = ctx.now();
      return (
        shownOnce("Enrollment token", token) +
        fields(
          [
            ["Token ID", t?.id],
            ["Expires", formatTimeAndAge(dateOf(t?.expiresAt), now)],
            ["Node name", t?.nodeName || undefined],
            ["Re-enrolls node", t?.nodeId || undefined],
            ["Labels", t && Object.keys(t.labels).length > 0 ? formatLabels(t.labels) : undefined],
          ],
          "",
        ) +
        `\nJoin a node by running this on it:\n\n  ${clean(joinCommand)}\n`
      );
    });
  },
});

/** The token table. Pure. */
function tokenTable(tokens: EnrollmentToken[], now: Date): string {
  return table(
    ["ID", "STATE", "NAME", "NODE", "CREATED", "EXPIRES", "LABELS"],
    tokens.map((t) => [
      t.id,
      enumName(EnrollmentTokenState, t.state),
      t.nodeName || "-",
      t.nodeId || "-",
      formatAge(dateOf(t.createdAt), now),
      t.state === EnrollmentTokenState.ACTIVE ? formatAge(dateOf(t.expiresAt), now) : "-",
      formatLabels(t.labels),
    ]),
  );
}

const listCommand = pagedListCommand("List enrollment tokens (never their secrets), newest first", {
  schema: ListEnrollmentTokensResponseSchema,
  fetch: (client, page) => client.listEnrollmentTokens(page),
  empty: "No enrollment tokens.\n",
  table: tokenTable,
});

const revokeCommand = command("revoke ID", "Revoke an unused enrollment token", {
  async run(ctx, _values, positionals) {
    const id = idArg(positionals, "token ID");
    const res = await ctx.client().revokeEnrollmentToken({ id });
    return printReply(ctx, RevokeEnrollmentTokenResponseSchema, res, ({ enrollmentToken: t }) => {
      return `Enrollment token ${id} is ${t ? enumName(EnrollmentTokenState, t.state) : "revoked"}.\n`;
    });
  },
});

export const tokensGroup: Group = {
  name: "tokens",
  summary: "Enrollment tokens that let a node join, and your personal access tokens",
  topic: "enrollment and personal tokens",
  commands: [createCommand, listCommand, revokeCommand, personalTokensCommand],
};
