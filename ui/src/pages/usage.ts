// Usage: service clients' tokens and requests over a chosen range, optionally one key's or one
// deployment's: a chart over time, tables by deployment and by key, and a CSV of both tables built
// in the page (a data: link, nothing asked of the server twice). Polled, so traffic shows as it comes.
import { timestampFromMs } from "@bufbuild/protobuf/wkt";
import { type ServiceKey, UsageGrouping, type UsageRow } from "../../../gen/proto/modelforge/admin/v1/admin_pb.js";
import { admin, pause } from "../api.js";
import { lineChart } from "../chart.js";
import { formValues, h, morph, section, table } from "../dom.js";
import { limitsText } from "./service-keys.js";
import {
  bucketSeries,
  cachedShare,
  isUsageRange,
  quotaText,
  quotaWindows,
  tokensOf,
  ttftMs,
  type UsageRange,
  usageCsv,
  usageRanges,
} from "../usage.js";

const pollMs = 3_000;
const buckets = {
  minute: { by: UsageGrouping.MINUTE, ms: 60_000 },
  hour: { by: UsageGrouping.HOUR, ms: 3_600_000 },
  day: { by: UsageGrouping.DAY, ms: 86_400_000 },
};

export async function usagePage(main: HTMLElement, signal: AbortSignal, params: URLSearchParams): Promise<void> {
  const asked = params.get("range") ?? "24h";
  const range: UsageRange = isUsageRange(asked) ? asked : "24h";
  const keyId = params.get("key") ?? "";
  const deployment = params.get("deployment") ?? "";
  const keys = (await admin.listServiceKeys({ pageSize: 1000, includeRevoked: true }, { signal })).keys;
  const keyNames = new Map(keys.map((k) => [k.id, k.name]));
  const keyName = (id: string) => keyNames.get(id) ?? id.slice(0, 8);
  const filter = h(
    "form",
    {
      class: "inline",
      onsubmit: (e) => {
        e.preventDefault();
        const v = formValues(filter);
        const q = new URLSearchParams({ range: v.range ?? "24h" });
        if (v.key) q.set("key", v.key);
        if (v.deployment) q.set("deployment", v.deployment.trim());
        location.hash = `#/usage?${q}`;
      },
    },
    h(
      "label",
      {},
      "Range ",
      h(
        "select",
        { name: "range", "data-testid": "usage-range" },
        ...Object.keys(usageRanges).map((r) => h("option", { value: r, selected: r === range }, `last ${r}`)),
      ),
    ),
    h(
      "label",
      {},
      "Key ",
      h(
        "select",
        { name: "key", "data-testid": "usage-key" },
        h("option", { value: "" }, "every key"),
        ...keys.map((k) => h("option", { value: k.id, selected: k.id === keyId }, k.name)),
      ),
    ),
    h("label", {}, "Deployment ", h("input", { name: "deployment", value: deployment, placeholder: "every deployment" })),
    h("button", { type: "submit" }, "Show"),
  );
  const body = h("div", {});
  const quotas = h("div", { class: "quotas" });
  const key = keys.find((k) => k.id === keyId);
  main.replaceChildren(
    h("h1", {}, "Usage"),
    filter,
    // One key's usage is read against its quota.
    key === undefined ? "" : h("p", { "data-testid": "usage-limits" }, `Key ${key.name}: limits ${limitsText(key.limits)}.`),
    quotas,
    body,
  );
  const { seconds, bucket } = usageRanges[range];
  const { by, ms } = buckets[bucket];
  while (!signal.aborted) {
    const until = Date.now();
    const since = until - seconds * 1000;
    const ask = (grouping: UsageGrouping) =>
      admin.getUsage({ keyId, deployment, since: timestampFromMs(since), until: timestampFromMs(until), by: grouping }, { signal });
    const [overTime, byDeployment, byKey] = await Promise.all([ask(by), ask(UsageGrouping.DEPLOYMENT), ask(UsageGrouping.KEY)]);
    const series = (pick: (r: UsageRow) => number) => bucketSeries(overTime.rows, since, until, ms, pick);
    const prompt = series((r) => Number(r.promptTokens));
    const completion = series((r) => Number(r.completionTokens));
    const requests = series((r) => Number(r.requests));
    const failed = series((r) => Number(r.failedRequests));
    const totals = byDeployment.rows.reduce((t, r) => ({ requests: t.requests + Number(r.requests), tokens: t.tokens + tokensOf(r) }), {
      requests: 0,
      tokens: 0,
    });
    const csv = usageCsv(byDeployment.rows, byKey.rows, keyName);
    if (key !== undefined) morph(quotas, await quotaMeters(key, until, signal));
    morph(body, [
      h(
        "div",
        { class: "counts" },
        h(
          "div",
          { class: "tile" },
          h("span", { class: "value", "data-testid": "usage-requests" }, totals.requests),
          h("span", {}, "requests"),
        ),
        h("div", { class: "tile" }, h("span", { class: "value", "data-testid": "usage-tokens" }, totals.tokens), h("span", {}, "tokens")),
      ),
      section(
        `Over the last ${range}, per ${bucket}`,
        h(
          "div",
          { class: "charts" },
          lineChart(
            "Tokens",
            [
              { name: "prompt", values: prompt },
              { name: "completion", values: completion },
            ],
            Math.max(1, ...prompt, ...completion),
            "",
            "chart-usage-tokens",
          ),
          lineChart(
            "Requests",
            [
              { name: "all", values: requests },
              { name: "failed", values: failed },
            ],
            Math.max(1, ...requests),
            "",
            "chart-usage-requests",
          ),
        ),
      ),
      overTime.truncated || byDeployment.truncated || byKey.truncated
        ? h("p", { class: "hint" }, "More rows than one answer holds: choose a shorter range.")
        : h("span", {}),
      section(
        "By deployment",
        usageTable("Deployment", byDeployment.rows, (r) => r.deploymentName || r.deploymentId, "usage-deployments"),
      ),
      section(
        "By key",
        usageTable("Key", byKey.rows, (r) => keyName(r.keyId), "usage-keys"),
      ),
      h(
        "a",
        {
          class: "button csv",
          download: `modelforge-usage-${range}.csv`,
          href: `data:text/csv;charset=utf-8,${encodeURIComponent(csv)}`,
          "data-testid": "usage-csv",
        },
        "Download CSV",
      ),
    ]);
    await pause(pollMs, signal);
  }
}

function usageTable(first: string, rows: UsageRow[], name: (r: UsageRow) => string, testId: string): HTMLElement {
  if (rows.length === 0) return h("p", { "data-testid": testId }, "No usage in this range.");
  return table(
    [first, "Requests", "Failed", "Prompt tokens", "Cached", "Cached share", "Completion tokens", "Mean time to first token"],
    rows.map((r) => [
      name(r),
      String(r.requests),
      String(r.failedRequests),
      String(r.promptTokens),
      String(r.cachedPromptTokens),
      cachedShare(r),
      String(r.completionTokens),
      r.meanTimeToFirstToken === undefined ? "-" : `${ttftMs(r).toFixed(0)} ms`,
    ]),
    testId,
  );
}

/** A key's token quotas for the day and the month (UTC, as the server counts them), each as a meter. */
async function quotaMeters(key: ServiceKey, now: number, signal: AbortSignal): Promise<HTMLElement[]> {
  const { dayStart, monthStart } = quotaWindows(now);
  const wanted = [
    { label: "Tokens today", limit: Number(key.limits?.dailyTokens ?? 0n), since: dayStart, testId: "quota-day" },
    { label: "Tokens this month", limit: Number(key.limits?.monthlyTokens ?? 0n), since: monthStart, testId: "quota-month" },
  ].filter((q) => q.limit > 0);
  return Promise.all(
    wanted.map(async (q) => {
      const rows = (
        await admin.getUsage(
          { keyId: key.id, since: timestampFromMs(q.since), until: timestampFromMs(now), by: UsageGrouping.KEY },
          { signal },
        )
      ).rows;
      const used = rows.reduce((sum, r) => sum + tokensOf(r), 0);
      return h(
        "p",
        { "data-testid": q.testId },
        h("meter", { min: 0, max: q.limit, value: Math.min(used, q.limit), high: q.limit * 0.9 }),
        " ",
        quotaText(q.label, used, q.limit),
      );
    }),
  );
}
