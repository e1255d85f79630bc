// A fresh, private database for one test file, so files can run in parallel.
//
// MODELFORGE_TEST_DB=pglite (default): a temporary data directory holding a copy of the run's
// migrated template (test/global-setup.ts), or nothing (`empty`: PGlite creates the database on
// first open).
// MODELFORGE_TEST_DB=postgres: a new database mf_test_<hex> on the server named by
// MODELFORGE_TEST_POSTGRES_URL (default postgresql://postgres@127.0.0.1:5432/postgres), created
// from the run's migrated template database unless `empty`, and dropped on cleanup. The data
// directory is still a fresh temporary directory (certificates etc.).
// Outside a vitest run (benchmarks) there is no template: every database starts empty.
import { randomBytes } from "node:crypto";
import { cp, mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import pg from "pg";
import { PrismaPg } from "@prisma/adapter-pg";
import { PrismaClient } from "../../gen/prisma/client.js";
import { afterAll, beforeAll, inject } from "vitest";
import type { TemplateLocation } from "./template.js";
import { freePort } from "./ports.js";
import { openDatabase, type Database, type OpenDatabaseOptions } from "../../server/db/client.js";
import { createLogger } from "../../server/observability/logger.js";
import { pgDirect, type DirectQuery } from "../../server/db/direct.js";

export type TestBackend = "pglite" | "postgres";

export interface TestDatabase {
  backend: TestBackend;
  /** Set for the postgres backend only. */
  databaseUrl?: string;
  dataDir: string;
  /** Drops the database / removes the directory. Idempotent. */
  cleanup(): Promise<void>;
}

export interface TestDatabaseOptions {
  /** No schema at all, for tests of migration itself; otherwise the migrated template's copy. */
  empty?: boolean;
}

export const DEFAULT_TEST_POSTGRES_URL = "postgresql://postgres@127.0.0.1:5432/postgres";

/** The backend chosen by MODELFORGE_TEST_DB. */
export function testBackend(): TestBackend {
  const v = (process.env.MODELFORGE_TEST_DB ?? "pglite").trim().toLowerCase();
  if (v === "" || v === "pglite") return "pglite";
  if (v === "postgres" || v === "postgresql") return "postgres";
  throw new Error(`MODELFORGE_TEST_DB must be "pglite" or "postgres", not "${v}"`);
}

/** The PostgreSQL server tests use, as a URL to its maintenance database. */
export function testPostgresBase(): URL {
  return new URL(process.env.MODELFORGE_TEST_POSTGRES_URL ?? DEFAULT_TEST_POSTGRES_URL);
}

/** Runs one statement on the test PostgreSQL server's maintenance database. */
export async function postgresAdmin(sql: string): Promise<void> {
  const admin = new pg.Client({ connectionString: testPostgresBase().toString(), connectionTimeoutMillis: 5_000 });
  try {
    await admin.connect();
    await admin.query(sql);
  } finally {
    await admin.end().catch(() => undefined);
  }
}

/** The migrated template test/global-setup.ts built for this run, if this is a vitest run. */
function runTemplate(backend: TestBackend): TemplateLocation | undefined {
  if (!process.env.VITEST) return undefined;
  const template = inject("databaseTemplate");
  return template?.backend === backend ? template : undefined;
}

export async function createTestDatabase(backend: TestBackend = testBackend(), opts: TestDatabaseOptions = {}): Promise<TestDatabase> {
  const template = opts.empty ? undefined : runTemplate(backend);
  const dataDir = await mkdtemp(join(tmpdir(), "mf-test-"));
  const removeDir = () => rm(dataDir, { recursive: true, force: true });
  if (backend === "pglite") {
    if (template?.backend === "pglite") await cp(template.dir, join(dataDir, "pglite"), { recursive: true });
    let done: Promise<void> | undefined;
    return { backend, dataDir, cleanup: () => (done ??= removeDir()) };
  }

  const name = `mf_test_${randomBytes(6).toString("hex")}`;
  try {
    await postgresAdmin(`CREATE DATABASE "${name}"${template?.backend === "postgres" ? ` TEMPLATE "${template.database}"` : ""}`);
  } catch (err) {
    await removeDir();
    throw err;
  }
  const url = testPostgresBase();
  url.pathname = `/${name}`;

  let done: Promise<void> | undefined;
  const cleanup = async () => {
    try {
      await postgresAdmin(`DROP DATABASE IF EXISTS "${name}" WITH (FORCE)`);
    } finally {
      await removeDir();
    }
  };
  return { backend, databaseUrl: url.toString(), dataDir, cleanup: () => (done ??= cleanup()) };
}

/**
 * A fresh database (as above) for the calling test file, opened by the server's own code (with
 * `options` beside the location) before its tests and dropped after them: for tests of the
 * server's queries.
 */
export function useTestDatabase(options: Omit<OpenDatabaseOptions, "databaseUrl" | "dataDir"> = {}): {
  readonly db: Database;
  readonly databaseUrl: string | undefined;
} {
  let t: TestDatabase | undefined;
  let db: Database | undefined;
  beforeAll(async () => {
    t = await createTestDatabase();
    db = await openDatabase({ log: createLogger("error"), ...options, databaseUrl: t.databaseUrl, dataDir: t.dataDir });
  });
  afterAll(async () => {
    await db?.close();
    await t?.cleanup();
  });
  return {
    get db() {
      if (db === undefined) throw new Error("the test database opens in beforeAll");
      return db;
    },
    get databaseUrl() {
      return t?.databaseUrl;
    },
  };
}

/**
 * A Prisma client whose every query fails as an unreachable PostgreSQL does (connection refused on
 * a loopback port nothing listens on): a database outage for code that takes a client. `close`
 * ends its pool.
 */
export async function unreachableDatabase(): Promise<{ prisma: PrismaClient; direct: DirectQuery; close(): Promise<void> }> {
  const port = await freePort();
  const pool = new pg.Pool({ connectionString: `postgresql://postgres@127.0.0.1:${port}/none`, max: 1, connectionTimeoutMillis: 1_000 });
  pool.on("error", () => undefined);
  const prisma = new PrismaClient({ adapter: new PrismaPg(pool) });
  return {
    prisma,
    direct: pgDirect(pool, { prepare: false }),
    close: async () => {
      await prisma.$disconnect();
      await pool.end();
    },
  };
}
