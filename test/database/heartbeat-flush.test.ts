// Heartbeats persisted in batches (server/liveness/heartbeats.ts) on a real database: newer times
// only, each node at most every `persistEvery`, and rows another transaction holds locked skipped
// and written by a later flush instead of waited for (PostgreSQL: PGlite has one session).
import { describe, expect, it } from "vitest";
import { randomUUID } from "node:crypto";
import pg from "pg";
import { HeartbeatBook } from "../../server/liveness/heartbeats.js";
import { useTestDatabase, testBackend } from "../support/db.js";

const t = useTestDatabase();

async function nodes(n: number): Promise<string[]> {
  const ids = Array.from({ length: n }, () => randomUUID());
  await t.db.prisma.node.createMany({ data: ids.map((id, i) => ({ id, name: `hb-${i}` })) });
  return ids;
}
const storedAt = async (id: string) => (await t.db.prisma.node.findUniqueOrThrow({ where: { id } })).lastHeartbeatAt?.getTime() ?? null;

describe("heartbeat flush", () => {
  it("writes each node's newest time once, never moves a stored time backwards, and holds back frequent writes", async () => {
    const [a, b] = await nodes(2);
    const book = new HeartbeatBook(5_000);
    const t0 = Date.parse("2026-11-30T10:00:00.000Z");
    book.record(a!, t0);
    book.record(b!, t0);
    expect(await book.flush(t.db.direct)).toBe(2);
    expect(await book.flush(t.db.direct)).toBe(0);
    // Within persistEvery of the last write: kept in memory only, but liveness still sees it.
    book.record(a!, t0 + 1_000);
    expect(await book.flush(t.db.direct)).toBe(0);
    expect(book.lastHeartbeatAt(a!, new Date(t0))).toBe(t0 + 1_000);
    book.record(a!, t0 + 6_000);
    expect(await book.flush(t.db.direct)).toBe(1);
    expect(await storedAt(a!)).toBe(t0 + 6_000);
    // Another replica stored a newer time for b meanwhile: an older one does not replace it.
    await t.db.prisma.node.update({ where: { id: b! }, data: { lastHeartbeatAt: new Date(t0 + 60_000) } });
    book.record(b!, t0 + 10_000);
    expect(await book.flush(t.db.direct)).toBe(1);
    expect(await storedAt(b!)).toBe(t0 + 60_000);
  });

  it("names the replica holding each session with the time, and a released session clears only this replica's name", async () => {
    const [here, elsewhere, none] = await nodes(3);
    const book = new HeartbeatBook(0);
    const at = Date.parse("2026-11-30T12:00:00.000Z");
    const holders = new Map([
      [here!, "replica-a"],
      [elsewhere!, "replica-a"],
    ]);
    const holderOf = (id: string) => holders.get(id) ?? null;
    for (const id of [here!, elsewhere!, none!]) book.record(id, at);
    expect(await book.flush(t.db.direct, holderOf, "replica-a")).toBe(3);
    const named = async () =>
      Object.fromEntries(
        (await t.db.prisma.node.findMany({ where: { id: { in: [here!, elsewhere!, none!] } } })).map((n) => [n.id, n.sessionReplica]),
      );
    expect(await named()).toEqual({ [here!]: "replica-a", [elsewhere!]: "replica-a", [none!]: null });
    // Both sessions end here; one node's session is meanwhile named on another replica.
    await t.db.prisma.node.update({ where: { id: elsewhere! }, data: { sessionReplica: "replica-b" } });
    holders.clear();
    book.release(here!);
    book.release(elsewhere!);
    expect(await book.flush(t.db.direct, holderOf, "replica-a")).toBe(0);
    expect(await named()).toEqual({ [here!]: null, [elsewhere!]: "replica-b", [none!]: null });
  });

  it.skipIf(testBackend() !== "postgres")("skips rows another transaction holds locked and writes them on a later flush", async () => {
    const [locked, free] = await nodes(2);
    const book = new HeartbeatBook(0);
    const at = Date.parse("2026-11-30T11:00:00.000Z");
    book.record(locked!, at);
    book.record(free!, at);
    const other = new pg.Client({ connectionString: t.databaseUrl });
    await other.connect();
    try {
      await other.query("BEGIN");
      await other.query(`SELECT id FROM "Node" WHERE id = $1 FOR UPDATE`, [locked]);
      const started = Date.now();
      expect(await book.flush(t.db.direct)).toBe(1);
      expect(Date.now() - started).toBeLessThan(2_000); // did not wait for the lock
      expect(await storedAt(free!)).toBe(at);
      expect(await storedAt(locked!)).toBeNull();
      await other.query("COMMIT");
    } finally {
      await other.end();
    }
    expect(await book.flush(t.db.direct)).toBe(1);
    expect(await storedAt(locked!)).toBe(at);
  });
});
