// forge audit list
import { timestampFromDate } from "@bufbuild/protobuf/wkt";
import { ListAuditEventsResponseSchema, type AuditEvent } from "../../gen/proto/modelforge/admin/v1/admin_pb.js";
import { parseIntFlag, parseSince, textOption, type Command, type Group } from "../args.js";
import { dateOf, formatLabels, formatTime, table } from "../format.js";
import { printJson } from "../output.js";

/** The audit table. Pure. */
export function renderAuditTable(events: AuditEvent[]): string {
  return table(
    ["TIME", "ACTOR", "ACTION", "TARGET", "CORRELATION", "DETAILS"],
    events.map((e) => [
      formatTime(dateOf(e.time)),
      e.actor,
      e.action,
      e.targetType && e.targetId ? `${e.targetType}/${e.targetId}` : e.targetId || e.targetType || "-",
      e.correlationId || "-",
      Object.keys(e.details).length === 0 ? "-" : formatLabels(e.details),
    ]),
  );
}

const listCommand: Command = {
  name: "list",
  summary: "List audit events, newest first",
  positionals: { min: 0, max: 0 },
  options: {
    action: { type: "string", value: "ACTION", description: 'only this action, e.g. "node.enrolled"' },
    target: { type: "string", value: "ID", description: "only events about this target id" },
    actor: { type: "string", value: "ACTOR", description: '"operator", "node:<uuid>" or "system"' },
    since: { type: "string", value: "WHEN", description: "only events since a duration ago (30m, 1h, 7d) or an ISO 8601 time" },
    limit: { type: "string", value: "N", description: "at most N events (1-1000, default 100)" },
  },
  async run(ctx, values) {
    const limit = values.limit === undefined ? 100 : parseIntFlag(values.limit as string, "--limit", 1, 1000);
    const since = values.since === undefined ? undefined : timestampFromDate(parseSince(values.since as string, ctx.now()));
    const res = await ctx.client().listAuditEvents({
      pageSize: limit,
      action: textOption(values, "action"),
      targetId: textOption(values, "target"),
      actor: textOption(values, "actor"),
      since,
    });
    if (ctx.json) {
      printJson(ctx, ListAuditEventsResponseSchema, res);
      return 0;
    }
    if (res.events.length === 0) {
      ctx.out("No audit events.\n");
      return 0;
    }
    ctx.out(renderAuditTable(res.events));
    if (res.nextPageToken !== "") ctx.err(`(more events than --limit ${limit}; raise --limit or narrow with --since)\n`);
    return 0;
  },
};

export const auditGroup: Group = {
  name: "audit",
  summary: "The audit log of operator, node and system actions",
  commands: [listCommand],
};
