// forge audit list
import { timestampFromDate } from "@bufbuild/protobuf/wkt";
import { ListAuditEventsResponseSchema, type AuditEvent } from "../../gen/proto/modelforge/admin/v1/admin_pb.js";
import { command, intOption, parseSince, textOption, valueOption, type Group } from "../args.js";
import { dateOf, formatLabels, formatTime, table } from "../format.js";
import { printList } from "../output.js";

/** The audit table. Pure. */
export function renderAuditTable(events: AuditEvent[]): string {
  return table(
    ["TIME", "ACTOR", "ACTION", "TARGET", "CORRELATION", "DETAILS"],
    events.map((e) => [
      formatTime(dateOf(e.time)),
      e.actorName ? `${e.actor} (${e.actorName})` : e.actor,
      e.action,
      e.targetType && e.targetId ? `${e.targetType}/${e.targetId}` : e.targetId || e.targetType || "-",
      e.correlationId || "-",
      Object.keys(e.details).length === 0 ? "-" : formatLabels(e.details),
    ]),
  );
}

const listCommand = command("list", "List audit events, newest first", {
  options: {
    action: valueOption("ACTION", 'only this action, e.g. "node.enrolled"'),
    target: valueOption("ID", "only events about this target id"),
    actor: valueOption("ACTOR", 'a user\'s email, "user:<uuid>", "break-glass", "node:<uuid>" or "system"'),
    since: valueOption("WHEN", "only events since a duration ago (30m, 1h, 7d) or an ISO 8601 time"),
    limit: valueOption("N", "at most N events (1-1000, default 100)"),
  },
  async run(ctx, values) {
    const limit = intOption(values, "limit", 1, 1000, 100);
    const since = values.since === undefined ? undefined : timestampFromDate(parseSince(values.since as string, ctx.now()));
    const res = await ctx.client().listAuditEvents({
      pageSize: limit,
      action: textOption(values, "action"),
      targetId: textOption(values, "target"),
      actor: textOption(values, "actor"),
      since,
    });
    printList(ctx, ListAuditEventsResponseSchema, res, { items: res.events, empty: "No audit events.\n", table: renderAuditTable });
    if (!ctx.json && res.events.length > 0 && res.nextPageToken !== "") {
      ctx.err(`(more events than --limit ${limit}; raise --limit or narrow with --since)\n`);
    }
    return 0;
  },
});

export const auditGroup: Group = {
  name: "audit",
  summary: "The audit log of operator, node and system actions",
  topic: "the audit log",
  commands: [listCommand],
};
