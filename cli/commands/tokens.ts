// forge tokens create | list | revoke
import { create } from "@bufbuild/protobuf";
import { durationFromMs } from "@bufbuild/protobuf/wkt";
import {
  CreateEnrollmentTokenResponseSchema,
  EnrollmentTokenState,
  ListEnrollmentTokensResponseSchema,
  RevokeEnrollmentTokenResponseSchema,
  type EnrollmentToken,
} from "../../gen/proto/modelforge/admin/v1/admin_pb.js";
import { idArg, parseDurationFlag, parseLabels, textOption, type Command, type Group } from "../args.js";
import { clean, dateOf, enumName, fields, formatAge, formatLabels, formatTimeAndAge, table } from "../format.js";
import { printJson } from "../output.js";

const createCommand: Command = {
  name: "create",
  summary: "Create a one-time enrollment token and print its join command",
  positionals: { min: 0, max: 0 },
  options: {
    name: { type: "string", value: "NAME", description: "name the enrolling node gets" },
    node: { type: "string", value: "NODE_ID", description: "re-enroll this existing node (revokes its active credential now)" },
    ttl: { type: "string", value: "DURATION", description: "how long the token is valid, e.g. 10m, 2h (server default 10m, at most 7d)" },
    label: { type: "string", multiple: true, value: "KEY=VALUE", description: "a label the node gets; repeatable" },
  },
  notes: "The token is printed once and is stored by the server only as a hash: it cannot be shown again.",
  async run(ctx, values) {
    const ttl = values.ttl === undefined ? undefined : durationFromMs(parseDurationFlag(values.ttl as string, "--ttl"));
    const res = await ctx.client().createEnrollmentToken({
      nodeName: textOption(values, "name"),
      nodeId: textOption(values, "node"),
      ttl,
      labels: parseLabels(values.label as string[] | undefined),
    });
    if (ctx.json) {
      printJson(ctx, CreateEnrollmentTokenResponseSchema, res);
      return 0;
    }
    const t = res.enrollmentToken;
    const now = ctx.now();
    ctx.out(
      "Enrollment token (shown once; it cannot be retrieved again):\n\n" +
        `  ${clean(res.token)}\n\n` +
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
        "\nJoin a node by running this on it:\n\n" +
        `  ${clean(res.joinCommand)}\n`,
    );
    return 0;
  },
};

const listCommand: Command = {
  name: "list",
  summary: "List enrollment tokens (never their secrets), newest first",
  positionals: { min: 0, max: 0 },
  async run(ctx) {
    const tokens: EnrollmentToken[] = [];
    let pageToken = "";
    do {
      const page = await ctx.client().listEnrollmentTokens({ pageSize: 1000, pageToken });
      tokens.push(...page.enrollmentTokens);
      pageToken = page.nextPageToken;
    } while (pageToken !== "");
    if (ctx.json) {
      printJson(ctx, ListEnrollmentTokensResponseSchema, create(ListEnrollmentTokensResponseSchema, { enrollmentTokens: tokens }));
      return 0;
    }
    if (tokens.length === 0) {
      ctx.out("No enrollment tokens.\n");
      return 0;
    }
    const now = ctx.now();
    ctx.out(
      table(
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
      ),
    );
    return 0;
  },
};

const revokeCommand: Command = {
  name: "revoke",
  summary: "Revoke an unused enrollment token",
  args: "ID",
  positionals: { min: 1, max: 1 },
  async run(ctx, _values, positionals) {
    const id = idArg(positionals, "token ID");
    const res = await ctx.client().revokeEnrollmentToken({ id });
    if (ctx.json) {
      printJson(ctx, RevokeEnrollmentTokenResponseSchema, res);
      return 0;
    }
    const state = res.enrollmentToken ? enumName(EnrollmentTokenState, res.enrollmentToken.state) : "revoked";
    ctx.out(`Enrollment token ${id} is ${state}.\n`);
    return 0;
  },
};

export const tokensGroup: Group = {
  name: "tokens",
  summary: "Enrollment tokens that let a node join",
  commands: [createCommand, listCommand, revokeCommand],
};
