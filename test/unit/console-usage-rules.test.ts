// The console's usage rules (ui/src/usage.ts): rows into evenly spaced buckets, and the CSV export,
// whose fields are quoted and defused for spreadsheets.
import { create } from "@bufbuild/protobuf";
import { DurationSchema, timestampFromMs } from "@bufbuild/protobuf/wkt";
import { describe, expect, it } from "vitest";
import { UsageRowSchema } from "../../gen/proto/modelforge/admin/v1/admin_pb.js";
import { bucketSeries, cachedShare, csvField, isUsageRange, quotaText, quotaWindows, usageCsv } from "../../ui/src/usage.js";
import { renderUsageTable } from "../../cli/commands/usage.js";
import { UsageGrouping } from "../../gen/proto/modelforge/admin/v1/admin_pb.js";

const minute = 60_000;
const at = (ms: number, requests: number) => create(UsageRowSchema, { start: timestampFromMs(ms), requests: BigInt(requests) });

describe("bucketSeries", () => {
  const since = 10 * minute + 30_000; // mid-minute: the first bucket is the minute it falls in
  it.each([
    { name: "no rows: zeros over the range", rows: [], until: since + 3 * minute, want: [0, 0, 0, 0] },
    {
      name: "rows in their minutes, gaps zero",
      rows: [at(10 * minute, 2), at(12 * minute, 5)],
      until: since + 3 * minute,
      want: [2, 0, 5, 0],
    },
    { name: "rows outside the range are left out", rows: [at(5 * minute, 9), at(20 * minute, 9)], until: since + minute, want: [0, 0] },
    { name: "an empty range still has one bucket", rows: [at(10 * minute, 1)], until: since, want: [1] },
  ])("$name", ({ rows, until, want }) => {
    expect(bucketSeries(rows, since, until, minute, (r) => Number(r.requests))).toEqual(want);
  });
});

describe("csvField", () => {
  it.each([
    ["plain", "plain"],
    ["a,b", '"a,b"'],
    ['say "hi"', '"say ""hi"""'],
    ["two\nlines", '"two\nlines"'],
    ["=HYPERLINK(1)", "'=HYPERLINK(1)"],
    ["-1+2", "'-1+2"],
    ["@sum", "'@sum"],
    [42, "42"],
    [-3, "-3"],
    [7n, "7"],
  ] as const)("%s -> %s", (input, want) => expect(csvField(input)).toBe(want));
});

describe("usageCsv", () => {
  it("writes a header, the deployment rows and the key rows, with key names and TTFT in ms", () => {
    const byDeployment = [
      create(UsageRowSchema, {
        deploymentId: "d1",
        deploymentName: "tiny",
        requests: 3n,
        failedRequests: 1n,
        promptTokens: 10n,
        cachedPromptTokens: 6n,
        completionTokens: 20n,
        meanTimeToFirstToken: create(DurationSchema, { seconds: 0n, nanos: 250_000_000 }),
      }),
    ];
    const byKey = [create(UsageRowSchema, { keyId: "k1", requests: 3n, promptTokens: 10n, completionTokens: 20n })];
    expect(usageCsv(byDeployment, byKey, (id) => (id === "k1" ? "svc,main" : id))).toBe(
      "group,id,name,requests,failed_requests,prompt_tokens,cached_prompt_tokens,completion_tokens,mean_ttft_ms\r\n" +
        "deployment,d1,tiny,3,1,10,6,20,250\r\n" +
        'key,k1,"svc,main",3,0,10,0,20,\r\n',
    );
  });
});

describe("isUsageRange", () => {
  it.each([
    ["1h", true],
    ["7d", true],
    ["2h", false],
    ["constructor", false],
  ])("%s -> %s", (s, want) => expect(isUsageRange(s)).toBe(want));
});

describe("a key's quotas", () => {
  it("count in the UTC day and month, as the server's limits do", () => {
    const now = Date.UTC(2026, 11, 4, 23, 59, 59, 999);
    expect(quotaWindows(now)).toEqual({ dayStart: Date.UTC(2026, 11, 4), monthStart: Date.UTC(2026, 11, 1) });
    expect(quotaWindows(Date.UTC(2027, 0, 1))).toEqual({ dayStart: Date.UTC(2027, 0, 1), monthStart: Date.UTC(2027, 0, 1) });
  });
  it.each([
    [0, 10_000, "Tokens today: 0 of 10,000 (0 %)"],
    [1_234, 10_000, "Tokens today: 1,234 of 10,000 (12 %)"],
    [9_999, 10_000, "Tokens today: 9,999 of 10,000 (99 %)"],
    [12_000, 10_000, "Tokens today: 12,000 of 10,000 (100 %)"],
  ])("%d of %d reads %s", (used, limit, want) => expect(quotaText("Tokens today", used, limit)).toBe(want));
});

describe("the share of prompt tokens served from cache", () => {
  it.each([
    [0n, 0n, "-", "-"],
    [1000n, 0n, "0.0 %", "0.0%"],
    [1000n, 452n, "45.2 %", "45.2%"],
    [3n, 3n, "100.0 %", "100.0%"],
  ])("%d prompt tokens, %d cached: console %s, forge usage %s", (promptTokens, cachedPromptTokens, console, cli) => {
    expect(cachedShare({ promptTokens, cachedPromptTokens })).toBe(console);
    const row = { deploymentName: "chat", requests: 1n, failedRequests: 0n, promptTokens, cachedPromptTokens, completionTokens: 0n };
    const rendered = renderUsageTable([row as unknown as Parameters<typeof renderUsageTable>[0][number]], UsageGrouping.DEPLOYMENT);
    expect(rendered).toContain("CACHED SHARE");
    expect(rendered.split("\n")[1]!.split(/\s+/)[5]).toBe(cli);
  });
});
