// Prepared statements on PostgreSQL (always PostgreSQL: PGlite has no pool and no names): which
// texts the policy names (server/db/statement-names.ts), that the hot session-open query really is
// kept prepared on the connection, that a limit of 0 prepares nothing, and that the prepared
// session-open query keeps working after a newer replica's migration adds a column to Node.
import { randomUUID } from "node:crypto";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { openDatabase, type Database } from "../../server/db/client.js";
import { statementNames } from "../../server/db/statement-names.js";
import { OpeningReads } from "../../server/sessions/open.js";
import { createTestDatabase, type TestDatabase } from "../support/db.js";

describe("statement names", () => {
  const cases: { name: string; limit: number; after?: number; track?: number; calls: string[]; want: string[] }[] = [
    { name: "named from the second sighting on", limit: 10, calls: ["a", "a", "a"], want: ["", "mf_1", "mf_1"] },
    { name: "each text its own name", limit: 10, calls: ["a", "b", "b", "a", "a"], want: ["", "", "mf_1", "mf_2", "mf_2"] },
    { name: "after 1 names at once", limit: 10, after: 1, calls: ["a", "b", "a"], want: ["mf_1", "mf_2", "mf_1"] },
    { name: "limit 0 names nothing", limit: 0, calls: ["a", "a", "a"], want: ["", "", ""] },
    {
      name: "no more names past the limit, the named keep theirs",
      limit: 1,
      calls: ["a", "a", "b", "b", "b", "a"],
      want: ["", "mf_1", "", "", "", "mf_1"],
    },
    // Tracking two: "c" forgets "a" and "b"'s single sightings, so "a" starts over.
    { name: "single sightings forgotten in bulk", limit: 10, track: 2, calls: ["a", "b", "c", "a", "a"], want: ["", "", "", "", "mf_1"] },
  ];
  it.each(cases)("$name", ({ limit, after, track, calls, want }) => {
    const name = statementNames({ limit, ...(after !== undefined ? { after } : {}), ...(track !== undefined ? { track } : {}) });
    expect(calls.map((sql) => name({ sql }))).toEqual(want);
  });
});

describe("prepared statements on PostgreSQL", () => {
  let tdb: TestDatabase;
  const open: Database[] = [];
  const nodeId = randomUUID();
  const identity = { nodeId, serial: "c0ffee", certificateExpiresAt: Date.now() + 86_400_000 };

  beforeAll(async () => {
    tdb = await createTestDatabase("postgres");
    const db = await openDatabase({ databaseUrl: tdb.databaseUrl!, dataDir: tdb.dataDir });
    open.push(db);
    await db.prisma.node.create({ data: { id: nodeId, name: "gpu-1" } });
    await db.prisma.nodeCredential.create({
      data: { serial: identity.serial, nodeId, expiresAt: new Date(identity.certificateExpiresAt) },
    });
  }, 60_000);
  afterAll(async () => {
    for (const db of open) await db.close();
    await tdb?.cleanup();
  });

  /** What the pooled connection the next statement runs on holds prepared (sequential calls reuse one connection). */
  const preparedOn = async (db: Database) =>
    (await db.prisma.$queryRaw<{ name: string; statement: string }[]>`SELECT name, statement FROM pg_prepared_statements`).map(
      (r) => `${r.name}: ${r.statement}`,
    );

  it("keeps the session-open query prepared, and it survives a column added by a newer replica", async () => {
    const db = await openDatabase({ databaseUrl: tdb.databaseUrl!, dataDir: tdb.dataDir, preparedStatements: 10 });
    open.push(db);
    for (let i = 0; i < 3; i++) expect((await new OpeningReads(db.direct).read(identity, new Date())).node.name).toBe("gpu-1");
    expect((await preparedOn(db)).filter((s) => s.includes('FROM "NodeCredential"')).map((s) => s.split(":")[0])).toEqual([
      "mf_session_open_batch",
    ]);

    // A prepared `SELECT n.*` fails here with "cached plan must not change result type".
    await open[0]!.prisma.$executeRawUnsafe(`ALTER TABLE "Node" ADD COLUMN "addedByNewerReplica" integer`);
    try {
      for (let i = 0; i < 3; i++) {
        const { node, hasJobs, cursors } = await new OpeningReads(db.direct).read(identity, new Date());
        expect(node.id).toBe(nodeId);
        expect(node).not.toHaveProperty("addedByNewerReplica");
        expect({ hasJobs, cursors }).toEqual({ hasJobs: false, cursors: {} });
      }
    } finally {
      await open[0]!.prisma.$executeRawUnsafe(`ALTER TABLE "Node" DROP COLUMN "addedByNewerReplica"`);
    }
  });

  it("prepares nothing with a limit of 0", async () => {
    const db = await openDatabase({ databaseUrl: tdb.databaseUrl!, dataDir: tdb.dataDir, preparedStatements: 0 });
    open.push(db);
    for (let i = 0; i < 3; i++) await new OpeningReads(db.direct).read(identity, new Date());
    expect(await preparedOn(db)).toEqual([]);
  });
});
