// A fresh, private database for one test file, so files can run in parallel.
//
// MODELFORGE_TEST_DB=pglite (default): an empty temporary data directory; the embedded database
// is created in it on first open.
// MODELFORGE_TEST_DB=postgres: a new database mf_test_<hex> on the server named by
// MODELFORGE_TEST_POSTGRES_URL (default postgresql://postgres@127.0.0.1:5432/postgres), dropped
// on cleanup. The data directory is still a fresh temporary directory (certificates etc.).
import { randomBytes } from "node:crypto";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import pg from "pg";

export type TestBackend = "pglite" | "postgres";

export interface TestDatabase {
  backend: TestBackend;
  /** Set for the postgres backend only. */
  databaseUrl?: string;
  dataDir: string;
  /** Drops the database / removes the directory. Idempotent. */
  cleanup(): Promise<void>;
}

export const DEFAULT_TEST_POSTGRES_URL = "postgresql://postgres@127.0.0.1:5432/postgres";

/** The backend chosen by MODELFORGE_TEST_DB. */
export function testBackend(): TestBackend {
  const v = (process.env.MODELFORGE_TEST_DB ?? "pglite").trim().toLowerCase();
  if (v === "" || v === "pglite") return "pglite";
  if (v === "postgres" || v === "postgresql") return "postgres";
  throw new Error(`MODELFORGE_TEST_DB must be "pglite" or "postgres", not "${v}"`);
}

export async function createTestDatabase(backend: TestBackend = testBackend()): Promise<TestDatabase> {
  const dataDir = await mkdtemp(join(tmpdir(), "mf-test-"));
  const removeDir = () => rm(dataDir, { recursive: true, force: true });
  if (backend === "pglite") {
    let done: Promise<void> | undefined;
    return { backend, dataDir, cleanup: () => (done ??= removeDir()) };
  }

  const base = new URL(process.env.MODELFORGE_TEST_POSTGRES_URL ?? DEFAULT_TEST_POSTGRES_URL);
  const name = `mf_test_${randomBytes(6).toString("hex")}`;
  const admin = new pg.Client({ connectionString: base.toString(), connectionTimeoutMillis: 5_000 });
  try {
    await admin.connect();
    await admin.query(`CREATE DATABASE "${name}"`);
  } catch (err) {
    await removeDir();
    throw err;
  } finally {
    await admin.end().catch(() => undefined);
  }
  const url = new URL(base.toString());
  url.pathname = `/${name}`;

  let done: Promise<void> | undefined;
  const cleanup = async () => {
    const drop = new pg.Client({ connectionString: base.toString(), connectionTimeoutMillis: 5_000 });
    try {
      await drop.connect();
      await drop.query(`DROP DATABASE IF EXISTS "${name}" WITH (FORCE)`);
    } finally {
      await drop.end().catch(() => undefined);
      await removeDir();
    }
  };
  return { backend, databaseUrl: url.toString(), dataDir, cleanup: () => (done ??= cleanup()) };
}
