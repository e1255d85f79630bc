// Direct statements on the embedded PGlite (server/db/pglite-direct.ts), always on PGlite: each is
// prepared once per instance and then run as one message, so what must hold is what PGlite's
// `query()` gives for free: the same rows, no statement slipping into a transaction another
// caller holds open, and a session left idle after any error.
import { join } from "node:path";
import { PGlite } from "@electric-sql/pglite";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { pgliteDirect } from "../../server/db/pglite-direct.js";
import { createTestDatabase, type TestDatabase } from "../support/db.js";

let tdb: TestDatabase;
let db: PGlite;
const failed: unknown[] = [];
let direct: ReturnType<typeof pgliteDirect>;

beforeAll(async () => {
  tdb = await createTestDatabase("pglite");
  db = new PGlite({ dataDir: join(tdb.dataDir, "pglite") });
  await db.exec(`CREATE TABLE direct_test (id int PRIMARY KEY, note text)`);
  direct = pgliteDirect(db, { failed: (err) => failed.push(err) });
}, 60_000);
afterAll(async () => {
  await db?.close();
  await tdb?.cleanup();
});

const insert = { name: "mf_test_insert", text: "INSERT INTO direct_test (id, note) VALUES ($1::int, $2::text) RETURNING id" };

async function prepared(): Promise<string[]> {
  const { rows } = await db.query<{ name: string }>("SELECT name FROM pg_prepared_statements ORDER BY name");
  return rows.map((r) => r.name);
}

describe("direct statements on PGlite", () => {
  it("returns the rows query() returns, value for value and type for type", async () => {
    const statement = {
      name: "mf_test_types",
      text: `SELECT $1::text[] AS list, $2::timestamptz AS at, $3::jsonb AS doc, $4::text AS absent,
                    true AS yes, 7::int AS n, 'x'::text AS word
              FROM generate_series(1, 2)`,
    };
    const values = [["a", "b,c", 'd"e'], "2026-12-01T12:00:00.123Z", JSON.stringify({ k: [1, null] }), null];
    const rows = await direct(statement, values);
    expect(rows).toEqual((await db.query(statement.text, values)).rows);
    const row = { list: ["a", "b,c", 'd"e'], at: new Date("2026-12-01T12:00:00.123Z"), doc: { k: [1, null] }, absent: null };
    expect(rows).toEqual([row, row].map((r) => ({ ...r, yes: true, n: 7, word: "x" })));
  });

  it("with preparing off, runs each statement through query() and prepares nothing", async () => {
    const plain = pgliteDirect(db, {}, false);
    const statement = { name: "mf_test_plain", text: "SELECT $1::int + 1 AS n" };
    expect(await plain(statement, [41])).toEqual([{ n: 42 }]);
    expect(await prepared()).not.toContain(statement.name);
  });

  it("prepares a statement once per instance, however many callers run it", async () => {
    expect(await prepared()).not.toContain(insert.name);
    expect(await direct(insert, [1, "one"])).toEqual([{ id: 1 }]);
    // A second caller on the same instance finds it prepared (preparing again would fail 42P05).
    expect(await pgliteDirect(db, {})(insert, [2, "two"])).toEqual([{ id: 2 }]);
    expect((await prepared()).filter((name) => name === insert.name)).toHaveLength(1);
  });

  it("waits behind a transaction another caller holds open, and is not rolled back with it", async () => {
    let settled = false;
    let pending: Promise<unknown> | undefined;
    await db
      .transaction(async (tx) => {
        await tx.query("INSERT INTO direct_test (id, note) VALUES (10, 'in the transaction')");
        pending = direct(insert, [11, "beside it"]).finally(() => {
          settled = true;
        });
        // Statements of the transaction still run; the direct one waits for its end.
        await tx.query("SELECT pg_sleep(0.05)");
        expect(settled).toBe(false);
        throw new Error("roll back");
      })
      .catch((err: unknown) => expect((err as Error).message).toBe("roll back"));
    expect(await pending).toEqual([{ id: 11 }]);
    const { rows } = await db.query<{ id: number }>("SELECT id FROM direct_test WHERE id IN (10, 11) ORDER BY id");
    expect(rows).toEqual([{ id: 11 }]);
  });

  it("rejects a failed statement with PostgreSQL's error, tells the hook, and leaves the session idle", async () => {
    failed.length = 0;
    await direct(insert, [20, "first"]);
    const err = await direct(insert, [20, "again"]).then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(err).toMatchObject({ code: "23505", constraint: "direct_test_pkey" });
    expect(failed).toEqual([err]);
    // Idle, not in an aborted transaction: the next statements run and commit.
    expect(await direct(insert, [21, "next"])).toEqual([{ id: 21 }]);
    expect((await db.query("SELECT count(*)::int AS n FROM direct_test WHERE id = 21")).rows).toEqual([{ n: 1 }]);
  });

  it("does not remember a statement that failed to prepare", async () => {
    const broken = { name: "mf_test_broken", text: "SELECT no_such_column FROM direct_test" };
    const err = await direct(broken, []).then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(err).toMatchObject({ code: "42703" });
    expect(await prepared()).not.toContain(broken.name);
    expect(await direct({ name: broken.name, text: "SELECT 1 AS one" }, [])).toEqual([{ one: 1 }]);
  });

  it("refuses one name for two texts rather than run the wrong statement", async () => {
    await direct({ name: "mf_test_once", text: "SELECT 1 AS one" }, []);
    await expect(direct({ name: "mf_test_once", text: "SELECT 2 AS two" }, [])).rejects.toThrow(
      "statement name mf_test_once is already prepared with another text",
    );
  });
});
