// forge usage: service clients' requests and tokens, by key, deployment or time.
import { durationMs, timestampFromDate } from "@bufbuild/protobuf/wkt";
import { GetUsageResponseSchema, UsageGrouping, type UsageRow } from "../../gen/proto/modelforge/admin/v1/admin_pb.js";
import { command, parseSince, textOption, UsageError, valueOption, type Group } from "../args.js";
import { dateOf, formatDuration, formatPercent, formatTime, table } from "../format.js";
import { printList } from "../output.js";

const groupings: Record<string, UsageGrouping> = {
  key: UsageGrouping.KEY,
  deployment: UsageGrouping.DEPLOYMENT,
  minute: UsageGrouping.MINUTE,
  hour: UsageGrouping.HOUR,
  day: UsageGrouping.DAY,
};

/** The usage table, its first column the grouping. Pure. */
export function renderUsageTable(rows: UsageRow[], by: UsageGrouping): string {
  const first =
    by === UsageGrouping.KEY
      ? "KEY"
      : by === UsageGrouping.MINUTE || by === UsageGrouping.HOUR || by === UsageGrouping.DAY
        ? "FROM"
        : "DEPLOYMENT";
  return table(
    [first, "REQUESTS", "FAILED", "PROMPT TOKENS", "CACHED", "CACHED SHARE", "COMPLETION TOKENS", "MEAN TTFT"],
    rows.map((r) => [
      first === "KEY" ? r.keyId : first === "FROM" ? formatTime(dateOf(r.start)) : r.deploymentName || r.deploymentId,
      String(r.requests),
      String(r.failedRequests),
      String(r.promptTokens),
      String(r.cachedPromptTokens),
      // Of the prompt tokens, the share the runtimes reused from their caches: what routing by prefix saves.
      r.promptTokens === 0n ? "-" : formatPercent((Number(r.cachedPromptTokens) * 100) / Number(r.promptTokens)),
      String(r.completionTokens),
      r.meanTimeToFirstToken === undefined ? "-" : formatDuration(durationMs(r.meanTimeToFirstToken)),
    ]),
  );
}

const showCommand = command("show", "Requests and tokens of service clients, grouped", {
  options: {
    key: valueOption("ID", "only this service key's usage"),
    deployment: valueOption("NAME", "only this deployment's usage"),
    since: valueOption("WHEN", "from a duration ago (30m, 24h, 7d) or an ISO 8601 time (default 24h)"),
    by: valueOption("GROUP", "key, deployment (default), minute, hour or day"),
  },
  async run(ctx, values) {
    const byName = textOption(values, "by") || "deployment";
    const by = groupings[byName];
    if (by === undefined) throw new UsageError(`--by: one of ${Object.keys(groupings).join(", ")}, not "${byName}"`);
    const since = values.since === undefined ? undefined : timestampFromDate(parseSince(values.since as string, ctx.now()));
    const res = await ctx.client().getUsage({ keyId: textOption(values, "key"), deployment: textOption(values, "deployment"), since, by });
    printList(ctx, GetUsageResponseSchema, res, { items: res.rows, empty: "No usage.\n", table: (rows) => renderUsageTable(rows, by) });
    if (!ctx.json && res.truncated) ctx.err("(more rows than one answer holds; narrow with --since or --by)\n");
    return 0;
  },
});

export const usageGroup: Group = {
  name: "usage",
  summary: "Service clients' usage: requests and tokens by key, deployment or time",
  topic: "service clients' usage",
  commands: [showCommand],
  defaultCommand: "show",
};
