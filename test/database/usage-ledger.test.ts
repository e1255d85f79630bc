// The usage ledger (server/usage/ledger.ts) against a real database: entries added up per key,
// deployment, minute and outcome; flushes that add to the rows already there; a flush that fails
// against an unreachable database keeping its counts for the next; and GetUsage's groupings over
// the rows (server/usage/report.ts).
import { afterAll, describe, expect, it } from "vitest";
import { randomUUID } from "node:crypto";
import { timestampFromMs } from "@bufbuild/protobuf/wkt";
import { UsageGrouping } from "../../gen/proto/modelforge/admin/v1/admin_pb.js";
import { UsageLedger } from "../../server/usage/ledger.js";
import { adminUsage, usageSpan } from "../../server/usage/report.js";
import { ManualClock } from "../../common/clock.js";
import { isDatabaseUnavailable } from "../../server/db/availability.js";
import { unreachableDatabase, useTestDatabase } from "../support/db.js";

const [keyA, keyB, dep] = [randomUUID(), randomUUID(), randomUUID()];
const t0 = Date.parse("2026-12-04T10:00:30Z");

describe("the usage ledger", () => {
  const test = useTestDatabase();
  const closers: (() => Promise<void>)[] = [];
  afterAll(async () => {
    for (const c of closers) await c();
  });

  it("adds entries up by key, deployment, minute and outcome, and keeps a failed flush's counts", async () => {
    const clock = new ManualClock(t0);
    const ledger = new UsageLedger(() => clock.now());
    ledger.record({
      keyId: keyA,
      deploymentId: dep,
      outcome: "ok",
      promptTokens: 5,
      cachedPromptTokens: 4,
      completionTokens: 7,
      firstTokenMs: 40,
    });
    ledger.record({
      keyId: keyA,
      deploymentId: dep,
      outcome: "ok",
      promptTokens: 3,
      cachedPromptTokens: 0,
      completionTokens: 2,
      firstTokenMs: 20,
    });
    ledger.record({ keyId: keyB, deploymentId: dep, outcome: "canceled", promptTokens: 0, cachedPromptTokens: 0, completionTokens: 4 });
    const away = await unreachableDatabase();
    closers.push(away.close);
    const failure = await ledger.flush(away.prisma).then(
      () => undefined,
      (err: unknown) => err,
    );
    expect(isDatabaseUnavailable(failure), String(failure)).toBe(true);
    expect(ledger.pending).toBe(2);
    // Counted while the database was away, in the same minute and the next.
    ledger.record({ keyId: keyA, deploymentId: dep, outcome: "ok", promptTokens: 1, cachedPromptTokens: 1, completionTokens: 1 });
    clock.advance(60_000);
    ledger.record({ keyId: keyA, deploymentId: dep, outcome: "ok", promptTokens: 1, cachedPromptTokens: 0, completionTokens: 10 });
    await ledger.flush(test.db.prisma);
    expect(ledger.pending).toBe(0);
    // A later flush adds to the row of its minute.
    ledger.record({ keyId: keyA, deploymentId: dep, outcome: "ok", promptTokens: 2, cachedPromptTokens: 2, completionTokens: 3 });
    await ledger.flush(test.db.prisma);
    const rows = await test.db.prisma.usageMinute.findMany({ orderBy: [{ minute: "asc" }, { keyId: "asc" }] });
    const plain = rows.map((r) => [
      r.keyId === keyA ? "A" : "B",
      r.minute.toISOString(),
      r.outcome,
      Number(r.requests),
      Number(r.promptTokens),
      Number(r.cachedPromptTokens),
      Number(r.completionTokens),
      Number(r.firstTokenMsSum),
      Number(r.firstTokenCount),
    ]);
    expect(plain).toEqual(
      expect.arrayContaining([
        ["A", "2026-12-04T10:00:00.000Z", "ok", 3, 9, 5, 10, 60, 2],
        ["B", "2026-12-04T10:00:00.000Z", "canceled", 1, 0, 0, 4, 0, 0],
        ["A", "2026-12-04T10:01:00.000Z", "ok", 2, 3, 2, 13, 0, 0],
      ]),
    );
    expect(plain).toHaveLength(3);

    const { getUsage } = adminUsage(test.db.prisma, clock);
    const since = timestampFromMs(t0 - 3_600_000);
    const ask = (by: UsageGrouping, filter: { keyId?: string } = {}) =>
      getUsage({ keyId: filter.keyId ?? "", deployment: "", since, by } as never, {} as never) as Promise<{
        rows: {
          keyId: string;
          requests: bigint;
          failedRequests: bigint;
          cachedPromptTokens: bigint;
          completionTokens: bigint;
          start?: { seconds: bigint };
        }[];
      }>;
    const byKey = await ask(UsageGrouping.KEY);
    expect(
      byKey.rows.map((r) => [r.keyId === keyA ? "A" : "B", Number(r.requests), Number(r.cachedPromptTokens), Number(r.completionTokens)]),
    ).toEqual([
      ["A", 5, 7, 23],
      ["B", 1, 0, 4],
    ]);
    const byMinute = await ask(UsageGrouping.MINUTE, { keyId: keyA });
    expect(byMinute.rows.map((r) => Number(r.completionTokens))).toEqual([10, 13]);
    const byDeployment = await ask(UsageGrouping.DEPLOYMENT);
    expect(byDeployment.rows.map((r) => [Number(r.requests), Number(r.failedRequests)])).toEqual([[6, 1]]);
  });

  it("moves a key's last use up to the latest minute it flushed, never back, and leaves an unused key's unset", async () => {
    const [used, unused] = [randomUUID(), randomUUID()];
    for (const id of [used, unused]) {
      await test.db.prisma.serviceKey.create({ data: { id, name: "k", prefix: "mfsk_", secretHash: id, deployments: ["d"] } });
    }
    const lastUse = async (id: string) => (await test.db.prisma.serviceKey.findUniqueOrThrow({ where: { id } })).lastUsedAt?.toISOString();
    const clock = new ManualClock(t0);
    const ledger = new UsageLedger(() => clock.now());
    ledger.record({ keyId: used, deploymentId: dep, outcome: "ok", promptTokens: 1, cachedPromptTokens: 1, completionTokens: 1 });
    await ledger.flush(test.db.prisma);
    expect(await lastUse(used)).toBe("2026-12-04T10:00:00.000Z");
    clock.advance(2 * 60_000);
    ledger.record({ keyId: used, deploymentId: dep, outcome: "unavailable", promptTokens: 0, cachedPromptTokens: 0, completionTokens: 0 });
    await ledger.flush(test.db.prisma);
    expect(await lastUse(used)).toBe("2026-12-04T10:02:00.000Z");
    // Another replica flushing an older minute late adds its counts and leaves the last use alone.
    const lateClock = new ManualClock(t0);
    const late = new UsageLedger(() => lateClock.now());
    late.record({ keyId: used, deploymentId: dep, outcome: "ok", promptTokens: 1, cachedPromptTokens: 1, completionTokens: 1 });
    await late.flush(test.db.prisma);
    expect(await lastUse(used)).toBe("2026-12-04T10:02:00.000Z");
    const first = await test.db.prisma.usageMinute.findUniqueOrThrow({
      where: { keyId_deploymentId_minute_outcome: { keyId: used, deploymentId: dep, minute: new Date(t0 - 30_000), outcome: "ok" } },
    });
    expect(Number(first.requests)).toBe(2);
    expect(await lastUse(unused)).toBeUndefined();
  });
});

describe("usageSpan", () => {
  const now = Date.parse("2026-12-04T12:00:00Z");
  it.each([
    ["the last day by default", {}, [now - 86_400_000, now]],
    ["since a time", { since: timestampFromMs(now - 3_600_000) }, [now - 3_600_000, now]],
  ])("%s", (_what, req, [since, until]) => {
    const span = usageSpan(req, now);
    expect([span.since.getTime(), span.until.getTime()]).toEqual([since, until]);
  });

  it.each([
    ["since after until", { since: timestampFromMs(now + 1) }],
    ["more than 400 days", { since: timestampFromMs(now - 401 * 86_400_000) }],
  ])("refuses %s", (_what, req) => {
    expect(() => usageSpan(req, now)).toThrow(/since/);
  });
});
