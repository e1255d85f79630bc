// The invocation counts (server/invoke/counts.ts): the merge of a failed flush's counts with what
// was counted meanwhile, table-driven; and a flush that fails against an unreachable database
// keeping its counts for the next one, which writes them to the real test database.
import { afterAll, describe, expect, it } from "vitest";
import { InvokeCounts, mergeCounts, type Counts } from "../../server/invoke/counts.js";
import { unreachableDatabase, useTestDatabase } from "../support/db.js";
import { isDatabaseUnavailable } from "../../server/db/availability.js";

const counts = (o: Record<string, Record<string, number>>): Counts =>
  new Map(Object.entries(o).map(([d, byOutcome]) => [d, new Map(Object.entries(byOutcome))]));
const plain = (c: Counts) => Object.fromEntries([...c].map(([d, byOutcome]) => [d, Object.fromEntries(byOutcome)]));

describe("mergeCounts", () => {
  it.each([
    ["nothing and nothing", {}, {}, {}],
    ["kept, nothing meanwhile", { d1: { ok: 3 } }, {}, { d1: { ok: 3 } }],
    ["nothing kept, some meanwhile", {}, { d1: { ok: 1 } }, { d1: { ok: 1 } }],
    ["same outcome added", { d1: { ok: 3 } }, { d1: { ok: 2 } }, { d1: { ok: 5 } }],
    ["other outcomes side by side", { d1: { ok: 3 } }, { d1: { unavailable: 1 } }, { d1: { ok: 3, unavailable: 1 } }],
    [
      "other deployments side by side",
      { d1: { ok: 1 }, d2: { canceled: 2 } },
      { d2: { canceled: 1, ok: 4 }, d3: { ok: 1 } },
      { d1: { ok: 1 }, d2: { canceled: 3, ok: 4 }, d3: { ok: 1 } },
    ],
  ])("%s", (_, a, b, sum) => {
    const [ca, cb] = [counts(a), counts(b)];
    expect(plain(mergeCounts(ca, cb))).toEqual(sum);
    expect(plain(mergeCounts(cb, ca))).toEqual(sum);
    // Neither input changes.
    expect(plain(ca)).toEqual(a);
    expect(plain(cb)).toEqual(b);
  });
});

describe("a flush that fails", () => {
  const test = useTestDatabase();
  const closers: (() => Promise<void>)[] = [];
  afterAll(async () => {
    for (const c of closers) await c();
  });

  it("keeps its counts for the next flush, added to those counted meanwhile", async () => {
    const away = await unreachableDatabase();
    closers.push(away.close);
    const c = new InvokeCounts();
    for (let i = 0; i < 3; i++) c.record("d1", "ok");
    c.record("d2", "unavailable");
    const failure = await c.flush(away.prisma, new Date()).then(
      () => undefined,
      (err: unknown) => err,
    );
    expect(isDatabaseUnavailable(failure), String(failure)).toBe(true);
    c.record("d1", "ok");
    c.record("d1", "canceled");
    await c.flush(test.db.prisma, new Date());
    await c.flush(test.db.prisma, new Date()); // nothing left: writes nothing
    const rows = await test.db.prisma.auditEvent.findMany({ where: { action: "deployment.invocations" }, orderBy: { targetId: "asc" } });
    expect(rows.map((r) => [r.targetId, r.actor, r.details])).toEqual([
      ["d1", "system", { ok: "4", canceled: "1" }],
      ["d2", "system", { unavailable: "1" }],
    ]);
    expect(c.take().size).toBe(0);
  });
});
