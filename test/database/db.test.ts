// The database layer on the backend chosen by MODELFORGE_TEST_DB (pglite by default, or postgres):
// schema and committed SQL agree, migrations apply once (also under concurrent starts), refused
// migrations and open failures are one clear line without secrets.
import { randomUUID } from "node:crypto";
import { appendFile, cp, mkdir, mkdtemp, open, readFile, readdir, rm, truncate, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { Prisma } from "../../gen/prisma/client.js";
import { openDatabase, DatabaseOpenError, type Database } from "../../server/db/client.js";
import { DEFAULT_MIGRATIONS_DIR, migrationChecksum, readMigrations } from "../../server/db/migrate.js";
import { createTestDatabase, testBackend, type TestDatabase } from "../support/db.js";

const backend = testBackend();
const onPostgres = backend === "postgres";

/** Asserts `p` rejects with a one-line DatabaseOpenError and returns it. */
async function openError(p: Promise<unknown>): Promise<DatabaseOpenError> {
  const err = await p.then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(err).toBeInstanceOf(DatabaseOpenError);
  const e = err as DatabaseOpenError;
  expect(e.message).not.toMatch(/[\r\n]/);
  expect(e.message.length).toBeGreaterThan(20);
  return e;
}

async function migrationNames(): Promise<string[]> {
  return (await readMigrations()).map((m) => m.name);
}

async function copyMigrations(): Promise<string> {
  const dir = await mkdtemp(join(tmpdir(), "mf-migrations-"));
  await cp(fileURLToPath(DEFAULT_MIGRATIONS_DIR), dir, { recursive: true });
  return dir;
}

describe(`database on ${backend}`, () => {
  let tdb: TestDatabase;
  let db: Database | undefined;
  const opts = () => ({ ...(tdb.databaseUrl ? { databaseUrl: tdb.databaseUrl } : {}), dataDir: tdb.dataDir });

  beforeAll(async () => {
    tdb = await createTestDatabase(backend, { empty: true });
  });
  afterAll(async () => {
    await db?.close();
    await tdb?.cleanup();
  });

  it("migrates a fresh database, and every model's findFirst runs against it", async () => {
    db = await openDatabase(opts());
    expect(db.kind).toBe(backend);
    expect(db.migrationsApplied).toEqual(await migrationNames());
    if (!onPostgres) expect(db.describe).toBe(`embedded PGlite at ${join(tdb.dataDir, "pglite")}`);
    else expect(db.describe).toMatch(/^postgresql:\/\/127\.0\.0\.1:5432\/mf_test_[0-9a-f]+$/);

    // Every model of the generated client, so a new model cannot be forgotten here.
    const models = Object.values(Prisma.ModelName);
    expect(models.length).toBeGreaterThan(0);
    const client = db.prisma as unknown as Record<string, { findFirst(): Promise<unknown> }>;
    for (const model of models) {
      const delegate = client[model.charAt(0).toLowerCase() + model.slice(1)];
      expect(delegate, `delegate for ${model}`).toBeDefined();
      await expect(delegate!.findFirst(), model).resolves.toBeNull();
    }
  });

  it("records migrations as Prisma does", async () => {
    const rows = await db!.prisma.$queryRaw<
      {
        migration_name: string;
        checksum: string;
        finished_at: Date | null;
        rolled_back_at: Date | null;
        applied_steps_count: number;
        id: string;
      }[]
    >`SELECT id, migration_name, checksum, finished_at, rolled_back_at, applied_steps_count FROM "_prisma_migrations" ORDER BY migration_name`;
    const files = await readMigrations();
    expect(rows.map((r) => r.migration_name)).toEqual(files.map((f) => f.name));
    for (const [i, r] of rows.entries()) {
      expect(r.checksum).toBe(migrationChecksum(files[i]!.sql));
      expect(r.finished_at).toBeInstanceOf(Date);
      expect(r.rolled_back_at).toBeNull();
      expect(r.applied_steps_count).toBe(1);
      expect(r.id).toMatch(/^[0-9a-f-]{36}$/);
    }
  });

  it("keeps data across a reopen and applies no migration twice (BigInt, Json, arrays, timestamps round-trip)", async () => {
    const nodeId = randomUUID();
    const heartbeat = new Date("2026-11-30T12:34:56.789Z");
    const big = 2n ** 53n + 1n;
    await db!.prisma.node.create({
      data: {
        id: nodeId,
        name: "node-a",
        labels: { zone: "eu-1", nested: { list: [1, "two", null, true] } },
        capabilities: ["artifact.acquire.v1", "runtime.probe.v1"],
        lastHeartbeatAt: heartbeat,
        gpus: {
          create: {
            uuid: "GPU-0",
            index: 0,
            pciBusId: "0000:01:00.0",
            model: "H100",
            memoryTotalBytes: 85_899_345_920n,
            driverVersion: "560.1",
            vendor: "nvidia",
          },
        },
        cursors: { create: { stream: "inventory", sequence: big, receivedAt: heartbeat } },
      },
    });
    await db!.close();
    db = undefined;

    db = await openDatabase(opts());
    expect(db.migrationsApplied).toEqual([]);
    const node = await db.prisma.node.findUniqueOrThrow({ where: { id: nodeId }, include: { gpus: true, cursors: true } });
    expect(node.labels).toEqual({ zone: "eu-1", nested: { list: [1, "two", null, true] } });
    expect(node.capabilities).toEqual(["artifact.acquire.v1", "runtime.probe.v1"]);
    expect(node.lastHeartbeatAt?.toISOString()).toBe(heartbeat.toISOString());
    expect(node.createdAt).toBeInstanceOf(Date);
    expect(node.gpus[0]?.memoryTotalBytes).toBe(85_899_345_920n);
    expect(node.cursors[0]?.sequence).toBe(big);
    // The instant stored is the real one (not shifted by a session time zone).
    const [row] = await db.prisma.$queryRaw<{ epoch_ms: number }[]>`
      SELECT (extract(epoch FROM "lastHeartbeatAt") * 1000)::float8 AS epoch_ms FROM "Node" WHERE id = ${nodeId}::uuid`;
    expect(row?.epoch_ms).toBe(heartbeat.getTime());
  });

  it.skipIf(!onPostgres)("pins sessions to UTC even when the database's default time zone is not", async () => {
    const name = new URL(tdb.databaseUrl!).pathname.slice(1);
    await db!.prisma.$executeRawUnsafe(`ALTER DATABASE "${name}" SET timezone TO 'Asia/Tokyo'`);
    await db!.close();
    db = await openDatabase(opts());
    const at = new Date("2026-06-01T00:00:00.000Z");
    const id = randomUUID();
    await db.prisma.node.create({ data: { id, name: "tz", disabledAt: at } });
    const [row] = await db.prisma.$queryRaw<{ epoch_ms: number; tz: string }[]>`
      SELECT (extract(epoch FROM "disabledAt") * 1000)::float8 AS epoch_ms, current_setting('TimeZone') AS tz FROM "Node" WHERE id = ${id}::uuid`;
    expect(row).toEqual({ epoch_ms: at.getTime(), tz: "UTC" });
    expect((await db.prisma.node.findUniqueOrThrow({ where: { id } })).disabledAt?.toISOString()).toBe(at.toISOString());
  });

  it.skipIf(!onPostgres)("applies each migration exactly once when two servers start together", async () => {
    const fresh = await createTestDatabase("postgres", { empty: true });
    try {
      const o = { databaseUrl: fresh.databaseUrl!, dataDir: fresh.dataDir };
      const [a, b] = await Promise.all([openDatabase(o), openDatabase(o)]);
      try {
        const names = await migrationNames();
        expect([...a.migrationsApplied, ...b.migrationsApplied].sort()).toEqual(names);
        const [count] = await a.prisma.$queryRaw<{ n: number; distinct_names: number }[]>`
          SELECT count(*)::int AS n, count(DISTINCT migration_name)::int AS distinct_names FROM "_prisma_migrations"`;
        expect(count).toEqual({ n: names.length, distinct_names: names.length });
      } finally {
        await a.close();
        await b.close();
      }
    } finally {
      await fresh.cleanup();
    }
  });

  describe("refusing migrations", () => {
    let t: TestDatabase;
    let dir: string;
    const o = () => ({ ...(t.databaseUrl ? { databaseUrl: t.databaseUrl } : {}), dataDir: t.dataDir, migrationsDir: dir });
    beforeAll(async () => {
      t = await createTestDatabase();
      dir = await copyMigrations();
      await (await openDatabase(o())).close();
    });
    afterAll(async () => {
      await t?.cleanup();
      if (dir) await rm(dir, { recursive: true, force: true });
    });

    it("refuses to start when an applied migration was edited", async () => {
      const [first] = await migrationNames();
      const file = join(dir, first!, "migration.sql");
      const original = await readFile(file);
      await appendFile(file, "\n-- an innocent-looking edit\n");
      try {
        const e = await openError(openDatabase(o()));
        expect(e.message).toContain(`migration ${first} was modified after it was applied`);
      } finally {
        await writeFile(file, original);
      }
      // Line endings converted by git still match, as with Prisma.
      await writeFile(file, original.toString("utf8").replace(/\n/g, "\r\n"));
      const ok = await openDatabase(o());
      expect(ok.migrationsApplied).toEqual([]);
      await ok.close();
      await writeFile(file, original);
    });

    it("rolls a failing migration back entirely and names it; a good new one applies once", async () => {
      const broken = join(dir, "29991231000000_broken");
      await mkdir(broken);
      await writeFile(join(broken, "migration.sql"), 'CREATE TABLE "Scratch" ("id" INTEGER);\n\nSELEC 1;\n');
      try {
        const e = await openError(openDatabase(o()));
        expect(e.message).toMatch(
          /^migration 29991231000000_broken failed and was rolled back: syntax error at or near "SELEC" \(SQLSTATE 42601\) near line 3 of migration\.sql/,
        );
      } finally {
        await rm(broken, { recursive: true });
      }

      const good = join(dir, "29991231000001_scratch");
      await mkdir(good);
      await writeFile(join(good, "migration.sql"), 'CREATE TABLE "Scratch" ("id" INTEGER);\nINSERT INTO "Scratch" VALUES (1);\n');
      const d1 = await openDatabase(o());
      expect(d1.migrationsApplied).toEqual(["29991231000001_scratch"]);
      const rows = await d1.prisma.$queryRaw<{ n: number }[]>`SELECT count(*)::int AS n FROM "Scratch"`;
      expect(rows[0]?.n).toBe(1);
      const failed = await d1.prisma.$queryRaw<
        { n: number }[]
      >`SELECT count(*)::int AS n FROM "_prisma_migrations" WHERE migration_name LIKE '%broken'`;
      expect(failed[0]?.n).toBe(0);
      await d1.close();
      const d2 = await openDatabase(o());
      expect(d2.migrationsApplied).toEqual([]);
      await d2.close();
    });

    it("refuses to start while a migration is recorded as failed and unresolved", async () => {
      const d = await openDatabase(o());
      await d.prisma.$executeRaw`INSERT INTO "_prisma_migrations" (id, checksum, migration_name, started_at, applied_steps_count)
        VALUES (${randomUUID()}, ${"0".repeat(64)}, ${"29991231000002_half_done"}, now(), 0)`;
      await d.close();
      const e = await openError(openDatabase(o()));
      expect(e.message).toMatch(
        /^migration 29991231000002_half_done was started at .* but never finished; .*prisma migrate resolve --rolled-back 29991231000002_half_done/,
      );
    });
  });

  describe("open failures", () => {
    it("reports an unreachable PostgreSQL quickly, in one line", async () => {
      const started = Date.now();
      const e = await openError(openDatabase({ databaseUrl: "postgresql://postgres@127.0.0.1:1/x", dataDir: tdb.dataDir }));
      expect(Date.now() - started).toBeLessThan(3_000);
      expect(e.message).toMatch(/^cannot reach PostgreSQL at postgresql:\/\/127\.0\.0\.1:1\/x: connect ECONNREFUSED/);
      expect(e.kind).toBe("postgres");
      expect(e.code).toBe("ECONNREFUSED");
    });

    it("never leaks a password from the URL", async () => {
      const secret = "s3cret-Pa55word";
      for (const databaseUrl of [
        `postgresql://postgres:${secret}@127.0.0.1:1/x`,
        `postgres://postgres:${encodeURIComponent(`${secret}/@`)}@127.0.0.1:1/x?sslmode=disable`,
        `postgresql://postgres@127.0.0.1:1/x?password=${secret}`,
        `postgresql://postgres:${secret}@[bad host/x`,
        `mysql://root:${secret}@127.0.0.1/x`,
      ]) {
        const e = await openError(openDatabase({ databaseUrl, dataDir: tdb.dataDir }));
        for (const text of [e.message, String(e.stack), JSON.stringify(e), String(e.cause ?? "")]) {
          expect(text).not.toContain(secret);
        }
      }
    });

    it("rejects an unsupported URL scheme clearly", async () => {
      const e = await openError(openDatabase({ databaseUrl: "mysql://root@127.0.0.1/x", dataDir: tdb.dataDir }));
      expect(e.message).toMatch(/^unsupported database URL scheme "mysql:"/);
    });

    it.skipIf(!onPostgres)("reports a missing database as a refusal", async () => {
      const url = new URL(tdb.databaseUrl!);
      url.pathname = `/mf_missing_${randomUUID().slice(0, 8)}`;
      const e = await openError(openDatabase({ databaseUrl: url.toString(), dataDir: tdb.dataDir }));
      expect(e.message).toMatch(
        /^PostgreSQL at postgresql:\/\/127\.0\.0\.1:5432\/mf_missing_\w+ refused the connection: database "mf_missing_\w+" does not exist/,
      );
      expect(e.code).toBe("3D000");
    });
  });

  describe.skipIf(onPostgres)("embedded database directory", () => {
    let template: string;
    const scratch: string[] = [];

    /** A copy of a healthy, closed, migrated PGlite data dir: <dataDir>/pglite. */
    async function copyOfHealthy(): Promise<{ dataDir: string; dir: string }> {
      const dataDir = await mkdtemp(join(tmpdir(), "mf-dmg-"));
      scratch.push(dataDir);
      await cp(template, join(dataDir, "pglite"), { recursive: true });
      return { dataDir, dir: join(dataDir, "pglite") };
    }

    // biome-ignore lint/suspicious/noDuplicateTestHooks: Biome reads describe.skipIf(...)(...) as the outer scope
    beforeAll(async () => {
      // The suite's own database (closed, then copied) serves as the template.
      await db?.close();
      db = undefined;
      template = join(tdb.dataDir, "pglite");
    });
    // biome-ignore lint/suspicious/noDuplicateTestHooks: as above
    afterAll(async () => {
      for (const d of scratch) await rm(d, { recursive: true, force: true });
    });

    const damages: [string, (dir: string) => Promise<void>][] = [
      ["empty PG_VERSION", (dir) => truncate(join(dir, "PG_VERSION"), 0)],
      ["garbage PG_VERSION", (dir) => writeFile(join(dir, "PG_VERSION"), "\u0000\u00ffnot a version")],
      ["foreign PG_VERSION", (dir) => writeFile(join(dir, "PG_VERSION"), "99\n")],
      ["truncated pg_control", (dir) => truncate(join(dir, "global", "pg_control"), 0)],
      ["garbage pg_control", (dir) => writeFile(join(dir, "global", "pg_control"), Buffer.alloc(8192, 0xa5))],
      [
        "emptied WAL",
        async (dir) => {
          for (const f of await readdir(join(dir, "pg_wal"))) await rm(join(dir, "pg_wal", f), { recursive: true, force: true });
        },
      ],
      ["missing base/", (dir) => rm(join(dir, "base"), { recursive: true })],
      [
        "not a directory",
        async (dir) => {
          await rm(dir, { recursive: true });
          await writeFile(dir, "oops");
        },
      ],
    ];

    for (const [what, damage] of damages) {
      it(`reports ${what} as a damaged database, in one line`, async () => {
        const { dataDir, dir } = await copyOfHealthy();
        await damage(dir);
        const e = await openError(openDatabase({ dataDir }));
        expect(e.message.startsWith(`embedded database at ${dir} is damaged or unreadable: `)).toBe(true);
        expect(e.kind).toBe("pglite");
      });
    }

    it("still opens a healthy copy after all that (no crashed or wedged runtime)", async () => {
      const { dataDir } = await copyOfHealthy();
      const d = await openDatabase({ dataDir });
      expect(d.migrationsApplied).toEqual([]);
      expect(await d.prisma.node.count()).toBeGreaterThan(0);
      await d.close();
    });

    it("refuses a second open of the same directory, and takes over a lock left by a dead process", async () => {
      const { dataDir, dir } = await copyOfHealthy();
      const d = await openDatabase({ dataDir });
      try {
        const e = await openError(openDatabase({ dataDir }));
        expect(e.message).toBe(`embedded database at ${dir} is already open in this process`);
      } finally {
        await d.close();
      }
      // Two opens racing in one process: exactly one wins.
      const raced = await Promise.allSettled([openDatabase({ dataDir }), openDatabase({ dataDir })]);
      expect(raced.map((r) => r.status).sort()).toEqual(["fulfilled", "rejected"]);
      for (const r of raced) if (r.status === "fulfilled") await r.value.close();
      // A lock file naming a process that no longer exists (pids are below 2^22 on Linux).
      const fh = await open(`${dir}.lock`, "w");
      await fh.writeFile("4194304\n");
      await fh.close();
      const again = await openDatabase({ dataDir });
      await again.close();
      // A lock held by a live process (this test runner's parent) is respected.
      await writeFile(`${dir}.lock`, `${process.ppid}\n`);
      const e = await openError(openDatabase({ dataDir }));
      expect(e.message).toMatch(new RegExp(`is in use by another process \\(pid ${process.ppid}\\)`));
      await rm(`${dir}.lock`);
    });
  });
});
