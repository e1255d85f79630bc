// Prisma's statements on the embedded PGlite, prepared once their text repeats
// (server/db/pglite-prepared.ts), always on PGlite. What `query()` gave for free must still hold:
// the same rows and types through Prisma, a transaction's statements inside its transaction (a
// rollback undoes a prepared write), Prisma's own error for a constraint, and a session left usable.
import { randomUUID } from "node:crypto";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { openDatabase, type Database } from "../../server/db/client.js";
import { createTestDatabase, type TestDatabase } from "../support/db.js";

let tdb: TestDatabase;
let db: Database;

beforeAll(async () => {
  tdb = await createTestDatabase("pglite");
  db = await openDatabase({ dataDir: tdb.dataDir, preparedStatements: 10 });
}, 60_000);
afterAll(async () => {
  await db?.close();
  await tdb?.cleanup();
});

const preparedTexts = async () =>
  (await db.prisma.$queryRaw<{ name: string; statement: string }[]>`SELECT name, statement FROM pg_prepared_statements`).filter((r) =>
    /^mf_\d+$/.test(r.name),
  );

describe("Prisma on PGlite with prepared statements", () => {
  it("prepares a repeated text and reads the same rows, value for value and type for type, before and after", async () => {
    const id = randomUUID();
    const at = new Date("2026-12-05T10:00:00.123Z");
    await db.prisma.node.create({
      data: { id, name: "prep-1", labels: { pool: "a" }, engines: ["llama.cpp", "openai-http"], lastHeartbeatAt: at },
    });
    const read = () => db.prisma.node.findUniqueOrThrow({ where: { id } });
    const first = await read();
    const reads = [await read(), await read(), await read()];
    expect(reads).toEqual([first, first, first]);
    expect(first).toMatchObject({ id, name: "prep-1", labels: { pool: "a" }, engines: ["llama.cpp", "openai-http"], lastHeartbeatAt: at });
    expect((await preparedTexts()).some((r) => r.statement.includes('FROM "public"."Node"'))).toBe(true);
  });

  it("runs a transaction's prepared statements inside it: a rollback undoes the prepared write", async () => {
    const id = randomUUID();
    await db.prisma.node.create({ data: { id, name: "prep-2" } });
    const rename = (name: string) =>
      db.prisma.$transaction(async (tx) => {
        await tx.node.updateMany({ where: { id }, data: { name } });
        if (name.endsWith("!")) throw new Error("roll back");
      });
    // Repeated until the update's text is prepared, then once more to be rolled back.
    for (const name of ["prep-2a", "prep-2b", "prep-2c"]) await rename(name);
    const before = (await preparedTexts()).length;
    await expect(rename("prep-2d!")).rejects.toThrow("roll back");
    expect((await preparedTexts()).length).toBe(before);
    expect((await db.prisma.node.findUniqueOrThrow({ where: { id } })).name).toBe("prep-2c");
  });

  it("answers a unique violation on a prepared insert with Prisma's P2002, and the next statements run", async () => {
    const create = (id: string, name: string) => db.prisma.node.create({ data: { id, name }, select: { id: true } });
    for (let i = 0; i < 3; i++) await create(randomUUID(), `prep-3-${i}`);
    const taken = randomUUID();
    await create(taken, "prep-3-taken");
    await expect(create(taken, "prep-3-again")).rejects.toMatchObject({ code: "P2002" });
    const next = randomUUID();
    expect(await create(next, "prep-3-next")).toEqual({ id: next });
    await expect(db.prisma.$transaction(async (tx) => tx.node.create({ data: { id: taken, name: "in-tx" } }))).rejects.toMatchObject({
      code: "P2002",
    });
    expect(await db.prisma.node.count({ where: { name: { startsWith: "prep-3" } } })).toBe(5);
  });

  it("prepares no more texts than its limit", async () => {
    const ids = Array.from({ length: 30 }, () => randomUUID());
    // Each list length is a new text; each is run twice, so each would be named.
    for (let n = 1; n <= ids.length; n++) {
      for (let twice = 0; twice < 2; twice++) await db.prisma.node.findMany({ where: { id: { in: ids.slice(0, n) } } });
    }
    expect((await preparedTexts()).length).toBe(10);
  });
});
