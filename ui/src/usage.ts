// Usage figures the console charts and exports, from GetUsage rows. Pure (no DOM), so the rules have
// table tests of their own (test/unit/console-usage-rules.test.ts).
import { durationMs, timestampDate } from "@bufbuild/protobuf/wkt";
import type { UsageRow } from "../../gen/proto/modelforge/admin/v1/admin_pb.js";

/** Ranges the usage page offers: name, length in seconds, and the time grouping its chart uses. */
export const usageRanges = {
  "1h": { seconds: 3600, bucket: "minute" },
  "24h": { seconds: 86400, bucket: "hour" },
  "7d": { seconds: 7 * 86400, bucket: "day" },
  "30d": { seconds: 30 * 86400, bucket: "day" },
} as const;
export type UsageRange = keyof typeof usageRanges;

export function isUsageRange(s: string): s is UsageRange {
  return Object.hasOwn(usageRanges, s);
}

export function tokensOf(r: UsageRow): number {
  return Number(r.promptTokens + r.completionTokens);
}

/**
 * Time rows (oldest first, only groups with usage) as one value per bucket from `since` to `until`,
 * zeros where nothing ended, so a chart's x axis is time rather than "rows that had traffic".
 */
export function bucketSeries(
  rows: UsageRow[],
  sinceMs: number,
  untilMs: number,
  bucketMs: number,
  pick: (r: UsageRow) => number,
): number[] {
  const first = Math.floor(sinceMs / bucketMs) * bucketMs;
  const count = Math.max(1, Math.min(10_000, Math.ceil((untilMs - first) / bucketMs)));
  const values = new Array<number>(count).fill(0);
  for (const r of rows) {
    if (r.start === undefined) continue;
    const i = Math.floor((timestampDate(r.start).getTime() - first) / bucketMs);
    if (i >= 0 && i < count) values[i]! += pick(r);
  }
  return values;
}

/** Mean time to first token in milliseconds, 0 for a group without streams. */
export function ttftMs(r: UsageRow): number {
  return r.meanTimeToFirstToken === undefined ? 0 : durationMs(r.meanTimeToFirstToken);
}

/** A CSV field: quoted when it holds a comma, quote or line break; a leading =, +, - or @ is defused for spreadsheets. */
export function csvField(value: string | number | bigint): string {
  let s = String(value);
  if (typeof value === "string" && /^[=+\-@\t\r]/.test(s)) s = `'${s}`;
  return /[",\r\n]/.test(s) ? `"${s.replace(/"/g, '""')}"` : s;
}

/** Of a row's prompt tokens, the share served from the runtimes' caches: "45.2 %", or "-" without prompt tokens. */
export function cachedShare(r: Pick<UsageRow, "promptTokens" | "cachedPromptTokens">): string {
  if (r.promptTokens === 0n) return "-";
  return `${((Number(r.cachedPromptTokens) * 100) / Number(r.promptTokens)).toFixed(1)} %`;
}

/** The usage table as CSV: one line per deployment row and per key row, with a header. */
export function usageCsv(byDeployment: UsageRow[], byKey: UsageRow[], keyName: (id: string) => string): string {
  const line = (group: string, id: string, name: string, r: UsageRow) =>
    [
      group,
      id,
      name,
      r.requests,
      r.failedRequests,
      r.promptTokens,
      r.cachedPromptTokens,
      r.completionTokens,
      r.meanTimeToFirstToken ? ttftMs(r) : "",
    ]
      .map(csvField)
      .join(",");
  return [
    "group,id,name,requests,failed_requests,prompt_tokens,cached_prompt_tokens,completion_tokens,mean_ttft_ms",
    ...byDeployment.map((r) => line("deployment", r.deploymentId, r.deploymentName, r)),
    ...byKey.map((r) => line("key", r.keyId, keyName(r.keyId), r)),
  ]
    .map((l) => `${l}\r\n`)
    .join("");
}

/** The UTC day and month a key's token quotas count in (server/usage/limit-rules.ts). */
export function quotaWindows(nowMs: number): { dayStart: number; monthStart: number } {
  const d = new Date(nowMs);
  return {
    dayStart: Date.UTC(d.getUTCFullYear(), d.getUTCMonth(), d.getUTCDate()),
    monthStart: Date.UTC(d.getUTCFullYear(), d.getUTCMonth(), 1),
  };
}

/** "Tokens today: 1,234 of 10,000 (12 %)": a quota's use, the percent floored and capped at 100. */
export function quotaText(label: string, used: number, limit: number): string {
  const percent = limit <= 0 ? 0 : Math.min(100, Math.floor((used * 100) / limit));
  return `${label}: ${used.toLocaleString("en-US")} of ${limit.toLocaleString("en-US")} (${percent} %)`;
}
