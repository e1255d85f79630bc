// Applies the committed SQL migrations (prisma/migrations/<name>/migration.sql) at server start.
//
// Prisma 7's `migrate deploy` needs a native schema engine that these machines cannot download,
// so the server applies migrations itself and records them in `_prisma_migrations` exactly as
// Prisma does (same table, same SHA-256 checksums), so `prisma migrate status/deploy` agree with
// it wherever the engine is available.
//
// Rules:
// - pending migrations run in name order, each together with its record in ONE transaction
//   (a failure leaves nothing behind and is retried at the next start);
// - the whole run holds a PostgreSQL advisory lock (the same key Prisma Migrate uses), so
//   replicas starting together, or a concurrent `prisma migrate deploy`, never apply one twice;
// - an applied migration whose file has changed since is refused (someone edited a committed
//   migration: write a new one instead);
// - a migration recorded as started but never finished or rolled back (left by
//   `prisma migrate deploy`) is refused until an operator resolves it.
//
// Migrations must be runnable inside a transaction (no CREATE INDEX CONCURRENTLY and the like).
//
// Prisma's `$executeRawUnsafe` cannot run multi-statement SQL, so this works on the raw driver
// behind a two-method interface: a dedicated `pg.Client` session for PostgreSQL (the simple query
// protocol runs multi-statement scripts) or the PGlite instance itself.

import { createHash, randomUUID } from "node:crypto";
import { readdir, readFile } from "node:fs/promises";
import type { Dirent } from "node:fs";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import type pg from "pg";
import type { PGlite } from "@electric-sql/pglite";
import { MigrationError, describeCause, errorCode } from "./errors.js";

/** The little a migrator needs from a database session. */
export interface MigrationExecutor {
  /** Runs one or more SQL statements (no parameters), discarding results. */
  exec(sql: string): Promise<void>;
  /** Runs one parameterised statement and returns its rows. */
  query<T>(sql: string, params?: unknown[]): Promise<T[]>;
}

/** Logger shape the migrator uses (pino's Logger fits). */
export interface MigrationLogger {
  info(obj: Record<string, unknown>, msg: string): void;
  warn(obj: Record<string, unknown>, msg: string): void;
}

export interface MigrateOptions {
  /** Directory holding `<name>/migration.sql`; defaults to the repository's prisma/migrations. */
  migrationsDir?: string | URL;
  log?: MigrationLogger;
  /** How long to wait for another process holding the migration lock (default 120 s). */
  lockTimeoutMs?: number;
}

/** A migration read from disk. */
export interface MigrationFile {
  name: string;
  sql: string;
  /** SHA-256 hex of the file's bytes, as Prisma records it. */
  checksum: string;
}

/** prisma/migrations, resolved relative to this file so it does not depend on the working directory. */
export const DEFAULT_MIGRATIONS_DIR = new URL("../../prisma/migrations", import.meta.url);

/**
 * The advisory lock key Prisma Migrate itself takes on PostgreSQL, so a `prisma migrate deploy`
 * run and a starting server also exclude each other.
 */
export const MIGRATION_LOCK_KEY = 72707369;

const LOCK_POLL_MS = 200;

// Prisma's own layout of the table (see its schema engine's PostgreSQL flavour).
const CREATE_MIGRATIONS_TABLE = `CREATE TABLE IF NOT EXISTS "_prisma_migrations" (
    "id"                    VARCHAR(36) PRIMARY KEY NOT NULL,
    "checksum"              VARCHAR(64) NOT NULL,
    "finished_at"           TIMESTAMPTZ,
    "migration_name"        VARCHAR(255) NOT NULL,
    "logs"                  TEXT,
    "rolled_back_at"        TIMESTAMPTZ,
    "started_at"            TIMESTAMPTZ NOT NULL DEFAULT now(),
    "applied_steps_count"   INTEGER NOT NULL DEFAULT 0
)`;

interface MigrationRow {
  migration_name: string;
  checksum: string;
  started_at: Date | string;
  finished_at: Date | string | null;
  rolled_back_at: Date | string | null;
}

/** Runs migrations through a dedicated `pg` session (must not be a pooled client shared with others). */
export function pgExecutor(client: pg.ClientBase): MigrationExecutor {
  return {
    async exec(sql) {
      // No parameters: node-postgres uses the simple query protocol, which accepts several statements.
      await client.query(sql);
    },
    async query<T>(sql: string, params: unknown[] = []) {
      const res = await client.query(sql, params);
      return res.rows as T[];
    },
  };
}

/** Runs migrations on a PGlite instance (one in-process session). */
export function pgliteExecutor(db: Pick<PGlite, "exec" | "query">): MigrationExecutor {
  return {
    async exec(sql) {
      await db.exec(sql);
    },
    async query<T>(sql: string, params: unknown[] = []) {
      const res = await db.query<T>(sql, params);
      return res.rows;
    },
  };
}

/** SHA-256 hex of a migration script. */
export function migrationChecksum(content: string | Buffer): string {
  return createHash("sha256").update(content).digest("hex");
}

/**
 * Whether a script matches a recorded checksum. Like Prisma, a file whose line endings git has
 * converted (CRLF <-> LF) still matches.
 */
function matchesChecksum(sql: string, checksum: string): boolean {
  const want = checksum.toLowerCase();
  if (migrationChecksum(sql) === want) return true;
  const lf = sql.replace(/\r\n/g, "\n");
  if (migrationChecksum(lf) === want) return true;
  return migrationChecksum(lf.replace(/\n/g, "\r\n")) === want;
}

function dirPath(dir: string | URL): string {
  return dir instanceof URL ? fileURLToPath(dir) : dir;
}

/** Reads every `<name>/migration.sql` under `dir`, sorted by name. */
export async function readMigrations(dir: string | URL = DEFAULT_MIGRATIONS_DIR): Promise<MigrationFile[]> {
  const root = dirPath(dir);
  let entries: Dirent[];
  try {
    entries = await readdir(root, { withFileTypes: true });
  } catch (err) {
    throw new MigrationError(`cannot read migrations directory ${root}: ${describeCause(err)}`, undefined, err);
  }
  const names = entries
    .filter((e) => e.isDirectory())
    .map((e) => e.name)
    .sort((a, b) => (a < b ? -1 : a > b ? 1 : 0));
  const files: MigrationFile[] = [];
  for (const name of names) {
    const file = join(root, name, "migration.sql");
    let bytes: Buffer;
    try {
      bytes = await readFile(file);
    } catch (err) {
      throw new MigrationError(`cannot read migration ${name} (${file}): ${describeCause(err)}`, name, err);
    }
    files.push({ name, sql: bytes.toString("utf8"), checksum: migrationChecksum(bytes) });
  }
  return files;
}

/** 1-based line of a character offset (PostgreSQL reports error positions 1-based). */
function lineOf(sql: string, position: unknown): number | undefined {
  const pos = typeof position === "string" ? Number.parseInt(position, 10) : typeof position === "number" ? position : NaN;
  if (!Number.isFinite(pos) || pos < 1) return undefined;
  let line = 1;
  for (let i = 0; i < Math.min(pos - 1, sql.length); i++) if (sql.charCodeAt(i) === 10) line++;
  return line;
}

function iso(value: Date | string | null): string {
  if (value === null) return "?";
  return value instanceof Date ? value.toISOString() : String(value);
}

async function acquireLock(db: MigrationExecutor, timeoutMs: number, log?: MigrationLogger): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  let warned = false;
  for (;;) {
    const rows = await db.query<{ locked: boolean }>(`SELECT pg_try_advisory_lock(${MIGRATION_LOCK_KEY}) AS locked`);
    if (rows[0]?.locked === true) return;
    if (Date.now() >= deadline) {
      throw new MigrationError(
        `timed out after ${Math.round(timeoutMs / 1000)} s waiting for the migration lock (advisory lock ${MIGRATION_LOCK_KEY}) held by another process`,
      );
    }
    if (!warned) {
      log?.info({ lockKey: MIGRATION_LOCK_KEY }, "waiting for another process to finish migrating");
      warned = true;
    }
    await new Promise((r) => setTimeout(r, LOCK_POLL_MS));
  }
}

/**
 * Applies every migration not yet applied, in name order, and returns the names applied (empty
 * when the database is up to date). Throws MigrationError when it must refuse.
 */
export async function migrate(db: MigrationExecutor, opts: MigrateOptions = {}): Promise<string[]> {
  const files = await readMigrations(opts.migrationsDir ?? DEFAULT_MIGRATIONS_DIR);
  const log = opts.log;

  await acquireLock(db, opts.lockTimeoutMs ?? 120_000, log);
  try {
    await db.exec(CREATE_MIGRATIONS_TABLE);
    const rows = await db.query<MigrationRow>(
      `SELECT migration_name, checksum, started_at, finished_at, rolled_back_at
         FROM "_prisma_migrations" ORDER BY started_at, migration_name`,
    );

    const failed = rows.find((r) => r.finished_at === null && r.rolled_back_at === null);
    if (failed) {
      throw new MigrationError(
        `migration ${failed.migration_name} was started at ${iso(failed.started_at)} but never finished; ` +
          `repair the database, then mark it with \`prisma migrate resolve --rolled-back ${failed.migration_name}\` ` +
          `(or --applied) before starting the server`,
        failed.migration_name,
      );
    }

    const applied = new Map<string, MigrationRow>();
    for (const r of rows) if (r.finished_at !== null && r.rolled_back_at === null) applied.set(r.migration_name, r);

    for (const f of files) {
      const row = applied.get(f.name);
      if (row && !matchesChecksum(f.sql, row.checksum)) {
        throw new MigrationError(
          `migration ${f.name} was modified after it was applied (recorded checksum ${row.checksum}, ` +
            `file now ${f.checksum}); committed migrations must not be edited: restore it and add a new migration`,
          f.name,
        );
      }
    }

    const known = new Set(files.map((f) => f.name));
    const unknown = [...applied.keys()].filter((n) => !known.has(n));
    if (unknown.length > 0) {
      log?.warn({ migrations: unknown }, "the database has migrations this build does not know (is it older than the database?)");
    }

    const done: string[] = [];
    for (const f of files) {
      if (applied.has(f.name)) continue;
      const started = Date.now();
      await db.exec("BEGIN");
      try {
        await db.exec(f.sql);
        await db.query(
          `INSERT INTO "_prisma_migrations"
             (id, checksum, migration_name, started_at, finished_at, applied_steps_count)
           VALUES ($1, $2, $3, now(), clock_timestamp(), 1)`,
          [randomUUID(), f.checksum, f.name],
        );
        await db.exec("COMMIT");
      } catch (err) {
        await db.exec("ROLLBACK").catch(() => undefined);
        const line = lineOf(f.sql, (err as { position?: unknown }).position);
        const code = errorCode(err);
        throw new MigrationError(
          `migration ${f.name} failed and was rolled back: ${describeCause(err)}` +
            (code && /^[0-9A-Z]{5}$/.test(code) ? ` (SQLSTATE ${code})` : "") +
            (line ? ` near line ${line} of migration.sql` : ""),
          f.name,
          err,
        );
      }
      done.push(f.name);
      log?.info({ migration: f.name, ms: Date.now() - started }, "applied migration");
    }
    return done;
  } finally {
    await db.query(`SELECT pg_advisory_unlock(${MIGRATION_LOCK_KEY})`).catch(() => undefined);
  }
}
