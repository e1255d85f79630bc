// Opens the control plane's database: a real PostgreSQL server when a URL is given, otherwise
// PGlite (PostgreSQL compiled to WebAssembly, in-process) stored under <dataDir>/pglite. Either
// way the committed migrations are applied (server/db/migrate.ts) and connectivity is checked
// before the Database is handed out, and any failure is one DatabaseOpenError line that never
// contains a password.
//
// Embedded backend: ARCHITECTURE.md asks to compare `pglite-prisma-adapter` with
// `@prisma/adapter-pg` over `@electric-sql/pglite-socket`. pglite-socket is not a dependency
// (and is not to be installed), so the embedded backend uses `pglite-prisma-adapter`, which
// drives the PGlite instance directly with no socket in between. PGlite is one PostgreSQL
// session: every query and transaction runs one after another. Two consequences for callers:
// read-modify-write races that happen on a real server cannot happen here (test on both
// backends), and code inside `prisma.$transaction(async (tx) => ...)` must use `tx`, never the
// outer `prisma`, which would wait for the transaction to end (a deadlock until Prisma's
// transaction timeout, 5 s by default).

import { constants as fsConstants } from "node:fs";
import { access, chmod, mkdir, open, readFile, readdir, rm, stat } from "node:fs/promises";
import { join, resolve } from "node:path";
import { PGlite } from "@electric-sql/pglite";
import { PrismaPGlite } from "pglite-prisma-adapter";
import { PrismaPg } from "@prisma/adapter-pg";
import pg from "pg";
import { PrismaClient } from "../../gen/prisma/client.js";
import { DatabaseOpenError, MigrationError, describeCause, errorCode, oneLine } from "./errors.js";
import { migrate, pgExecutor, pgliteExecutor, type MigrationLogger } from "./migrate.js";
import { OutageMonitor } from "./outage-monitor.js";

export { DatabaseOpenError } from "./errors.js";

/** The subset of a pino logger this module uses. */
export type DbLogger = MigrationLogger;

export interface OpenDatabaseOptions {
  /** postgres:// or postgresql:// URL; absent means the embedded PGlite database. */
  databaseUrl?: string;
  /** The server's data directory; the embedded database lives in <dataDir>/pglite. */
  dataDir: string;
  log?: DbLogger;
  /** Override of the migrations directory (tests). */
  migrationsDir?: string | URL;
  /** PostgreSQL connect timeout in milliseconds (default 5000). */
  connectTimeoutMs?: number;
}

export interface Database {
  prisma: PrismaClient;
  kind: "pglite" | "postgres";
  /** Where the data lives, safe to log (never a password). */
  describe: string;
  /** Migrations applied by this open (empty when the schema was already current). */
  migrationsApplied: string[];
  /** Connectivity failures are reported here: one line when the database is lost, one when it is back. */
  outage: OutageMonitor;
  /** Disconnects Prisma and closes the pool or the embedded database. Idempotent. */
  close(): Promise<void>;
}

const DEFAULT_CONNECT_TIMEOUT_MS = 5_000;

/** Opens, migrates and checks the database. Throws DatabaseOpenError (one line) on failure. */
export async function openDatabase(opts: OpenDatabaseOptions): Promise<Database> {
  const url = opts.databaseUrl?.trim();
  if (url) return openPostgres(url, opts);
  return openPglite(opts);
}

// ---------------------------------------------------------------------------------------------
// PostgreSQL through @prisma/adapter-pg

interface ParsedUrl {
  connectionString: string;
  describe: string;
  secrets: string[];
}

function parsePostgresUrl(raw: string): ParsedUrl {
  let url: URL;
  try {
    url = new URL(raw);
  } catch {
    // Never echo the URL: it may hold a password.
    throw new DatabaseOpenError("database URL is not a valid URL (expected postgresql://user:password@host:5432/database)", {
      kind: "postgres",
    });
  }
  if (url.protocol !== "postgres:" && url.protocol !== "postgresql:") {
    throw new DatabaseOpenError(
      `unsupported database URL scheme "${url.protocol}" (expected postgresql:// or postgres://, or no URL for the embedded database)`,
    );
  }

  const secrets: string[] = [];
  if (url.password) {
    secrets.push(url.password);
    try {
      secrets.push(decodeURIComponent(url.password));
    } catch {
      /* keep the raw form only */
    }
  }
  const paramPassword = url.searchParams.get("password");
  if (paramPassword) secrets.push(paramPassword);

  const schema = url.searchParams.get("schema");
  if (schema !== null && schema !== "public") {
    throw new DatabaseOpenError(`the database URL's ?schema=${schema} is not supported: the migrations create their tables in "public"`, {
      kind: "postgres",
    });
  }
  url.searchParams.delete("schema");

  // Both Prisma adapters turn a timestamptz into a Date by replacing the offset the server
  // printed with +00:00 instead of converting it, and write Dates as zone-less text that the
  // server reads in the session's time zone. With a server or database whose TimeZone is not UTC
  // every stored instant would be off by the offset, so each session is pinned to UTC.
  const options = url.searchParams.get("options");
  url.searchParams.set("options", `${options ? `${options} ` : ""}-c TimeZone=UTC`);

  const host = url.host || url.searchParams.get("host") || "localhost";
  const hostPort = /:\d+$/.test(host) || host.startsWith("/") ? host : `${host}:5432`;
  let database = url.pathname.replace(/^\//, "");
  try {
    database = decodeURIComponent(database);
  } catch {
    /* keep as written */
  }
  return {
    connectionString: url.toString(),
    describe: `postgresql://${hostPort}/${database}`,
    secrets: [...new Set(secrets)].filter((s) => s.length >= 3),
  };
}

function redact(text: string, secrets: string[]): string {
  let out = text;
  for (const s of secrets) out = out.split(s).join("***");
  return out;
}

const NETWORK_CODES = new Set([
  "ECONNREFUSED",
  "ECONNRESET",
  "ENOTFOUND",
  "EAI_AGAIN",
  "ETIMEDOUT",
  "EHOSTUNREACH",
  "ENETUNREACH",
  "EPIPE",
  "ENOENT", // unix socket path
]);

function connectError(err: unknown, where: string, secrets: string[]): DatabaseOpenError {
  const code = errorCode(err);
  const cause = redact(describeCause(err), secrets);
  const network = (code !== undefined && NETWORK_CODES.has(code)) || /timeout|terminated/i.test(cause);
  const message = network ? `cannot reach PostgreSQL at ${where}: ${cause}` : `PostgreSQL at ${where} refused the connection: ${cause}`;
  return new DatabaseOpenError(message, { kind: "postgres", ...(code ? { code } : {}) });
}

async function openPostgres(rawUrl: string, opts: OpenDatabaseOptions): Promise<Database> {
  const started = Date.now();
  const { connectionString, describe, secrets } = parsePostgresUrl(rawUrl);
  const timeout = opts.connectTimeoutMs ?? DEFAULT_CONNECT_TIMEOUT_MS;
  const clientConfig: pg.ClientConfig = {
    connectionString,
    connectionTimeoutMillis: timeout,
    application_name: "modelforge",
    keepAlive: true,
  };

  // Migrations run on a dedicated session: the advisory lock is per session, and the simple query
  // protocol lets one call run a whole multi-statement migration.
  const client = new pg.Client(clientConfig);
  client.on("error", () => {
    /* a broken session fails the pending query, which is reported below */
  });
  let migrationsApplied: string[];
  try {
    try {
      await client.connect();
    } catch (err) {
      throw connectError(err, describe, secrets);
    }
    try {
      migrationsApplied = await migrate(pgExecutor(client), {
        ...(opts.migrationsDir !== undefined ? { migrationsDir: opts.migrationsDir } : {}),
        ...(opts.log ? { log: opts.log } : {}),
      });
    } catch (err) {
      if (err instanceof MigrationError) {
        throw new DatabaseOpenError(`${redact(err.message, secrets)} (PostgreSQL at ${describe})`, { kind: "postgres" });
      }
      const code = errorCode(err);
      throw new DatabaseOpenError(`PostgreSQL at ${describe} failed while checking migrations: ${redact(describeCause(err), secrets)}`, {
        kind: "postgres",
        ...(code ? { code } : {}),
      });
    }
  } finally {
    await client.end().catch(() => undefined);
  }

  const pool = new pg.Pool({ ...clientConfig, max: 10, idleTimeoutMillis: 30_000 });
  const prisma = new PrismaClient({ adapter: new PrismaPg(pool) });
  const outage = new OutageMonitor(() => prisma.$queryRaw`SELECT 1`, opts.log, describe);
  pool.on("error", (err) => {
    // An idle connection died (server restart, network). The pool replaces it on demand; without
    // a listener the 'error' event would crash the process. A server going away ends every idle
    // connection at once: that is one outage, not one line per connection.
    if (outage.failed(err)) return;
    opts.log?.warn({ db: describe, err: redact(describeCause(err), secrets) }, "idle PostgreSQL connection failed");
  });
  const close = once(async () => {
    outage.close();
    await prisma.$disconnect().catch(() => undefined);
    await pool.end().catch(() => undefined);
  });

  try {
    await checkConnection(prisma, opts.log, describe);
  } catch (err) {
    await close();
    const code = errorCode(err);
    throw new DatabaseOpenError(`PostgreSQL at ${describe} failed its connectivity check: ${redact(describeCause(err), secrets)}`, {
      kind: "postgres",
      ...(code ? { code } : {}),
    });
  }

  opts.log?.info({ backend: "postgres", db: describe, migrationsApplied, ms: Date.now() - started }, "database ready");
  return { prisma, kind: "postgres", describe, migrationsApplied, outage, close };
}

// ---------------------------------------------------------------------------------------------
// Embedded PGlite through pglite-prisma-adapter

/** Lock files held by this process (a second open in the same process must fail too). */
const heldLocks = new Set<string>();

function processAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    return errorCode(err) === "EPERM";
  }
}

/**
 * PostgreSQL's own postmaster.pid does not protect a PGlite directory (every PGlite reports the
 * same pid and recovers over a live instance's files), so two processes could open it at once
 * and corrupt it. A lock file beside the directory prevents that; a lock left by a dead process
 * (kill -9, power loss) is taken over.
 */
async function lockDataDir(lockPath: string, where: string): Promise<() => Promise<void>> {
  if (heldLocks.has(lockPath)) {
    throw new DatabaseOpenError(`embedded database at ${where} is already open in this process`, { kind: "pglite" });
  }
  heldLocks.add(lockPath); // synchronously, so concurrent opens in this process cannot both proceed
  try {
    for (let attempt = 0; ; attempt++) {
      try {
        const fh = await open(lockPath, "wx", 0o600);
        try {
          await fh.writeFile(`${process.pid}\n`);
        } finally {
          await fh.close();
        }
        return once(async () => {
          await rm(lockPath, { force: true });
          heldLocks.delete(lockPath);
        });
      } catch (err) {
        if (errorCode(err) !== "EEXIST" || attempt >= 2) {
          throw new DatabaseOpenError(`cannot lock embedded database at ${where} (${lockPath}): ${describeCause(err)}`, {
            kind: "pglite",
            cause: err,
          });
        }
        const content = await readFile(lockPath, "utf8").catch(() => "");
        const pid = Number.parseInt(content, 10);
        if (!(pid > 0)) {
          // Another process may have created the file and not yet written its pid.
          const age = Date.now() - ((await stat(lockPath).catch(() => undefined))?.mtimeMs ?? 0);
          if (age < 10_000) {
            throw new DatabaseOpenError(`embedded database at ${where} is being opened by another process (${lockPath} was just created)`, {
              kind: "pglite",
            });
          }
        } else if (pid !== process.pid && processAlive(pid)) {
          // (Our own pid in the file, while we do not hold it, is a lock from an earlier run that got
          // the same pid, typically pid 1 in a container.)
          throw new DatabaseOpenError(
            `embedded database at ${where} is in use by another process (pid ${pid}); stop it first, or delete ${lockPath} if that process is not a ModelForge server`,
            { kind: "pglite" },
          );
        }
        // Stale lock. Two processes racing over the same stale lock could both get here; the window
        // is a few microseconds at start-up only.
        await rm(lockPath, { force: true });
      }
    }
  } catch (err) {
    heldLocks.delete(lockPath);
    throw err;
  }
}

/** Checks what can be checked without starting PostgreSQL: the WebAssembly build aborts on some damage. */
async function preflightPgliteDir(dir: string, where: string): Promise<void> {
  const damaged = (cause: string) =>
    new DatabaseOpenError(`embedded database at ${where} is damaged or unreadable: ${cause}`, { kind: "pglite" });
  const st = await stat(dir).catch(() => undefined);
  if (st === undefined) return; // first start: PGlite creates the cluster
  if (!st.isDirectory()) throw damaged("it is not a directory");
  let entries: string[];
  try {
    entries = await readdir(dir);
    await access(dir, fsConstants.R_OK | fsConstants.W_OK | fsConstants.X_OK);
  } catch (err) {
    throw damaged(describeCause(err));
  }
  if (entries.length === 0) return; // created by an earlier start that failed before initdb
  if (!entries.includes("PG_VERSION")) {
    throw damaged("PG_VERSION is missing but the directory is not empty (not a PostgreSQL data directory)");
  }
  let version: string;
  try {
    version = await readFile(join(dir, "PG_VERSION"), "utf8");
  } catch (err) {
    throw damaged(`cannot read PG_VERSION: ${describeCause(err)}`);
  }
  if (!/^\d+(\.\d+)?\s*$/.test(version)) throw damaged("PG_VERSION is empty or invalid");
  for (const required of ["global/pg_control", "base", "pg_wal"]) {
    const s = await stat(join(dir, required)).catch(() => undefined);
    if (s === undefined) throw damaged(`${required} is missing`);
    if (required === "global/pg_control" && s.size === 0) throw damaged("global/pg_control is empty");
  }
}

/** Keeps PGlite's recent server log lines to explain a failed start. */
class ServerLog {
  private readonly lines: string[] = [];
  add = (text: string): boolean => {
    for (const line of text.split("\n")) {
      if (!line.trim()) continue;
      this.lines.push(line);
      if (this.lines.length > 50) this.lines.shift();
    }
    return false;
  };
  /** The last PANIC/FATAL/ERROR line with its DETAIL, without timestamp prefixes. */
  cause(): string | undefined {
    for (let i = this.lines.length - 1; i >= 0; i--) {
      const m = /\b(PANIC|FATAL|ERROR):\s+(.*)$/.exec(this.lines[i] ?? "");
      if (!m) continue;
      const detail = /\bDETAIL:\s+(.*)$/.exec(this.lines[i + 1] ?? "");
      return oneLine(`${m[2]}${detail ? ` (${detail[1]})` : ""}`).replace(/\s{2,}/g, " ");
    }
    return undefined;
  }
  has(pattern: RegExp): boolean {
    return this.lines.some((l) => pattern.test(l));
  }
}

async function closeQuietly(db: PGlite): Promise<void> {
  // After a WebAssembly abort close() may throw or never settle; do not let it hold shutdown.
  await Promise.race([db.close().catch(() => undefined), new Promise((r) => setTimeout(r, 1000).unref())]);
}

async function openPglite(opts: OpenDatabaseOptions): Promise<Database> {
  const started = Date.now();
  const describePath = join(opts.dataDir, "pglite");
  const describe = `embedded PGlite at ${describePath}`;
  const dataDir = resolve(opts.dataDir);
  const dir = join(dataDir, "pglite");
  const damaged = (cause: string, err?: unknown) =>
    new DatabaseOpenError(`embedded database at ${dir} is damaged or unreadable: ${cause}`, {
      kind: "pglite",
      ...(err !== undefined ? { cause: err } : {}),
    });

  const existing = await stat(dir).catch(() => undefined);
  if (existing !== undefined && !existing.isDirectory()) throw damaged("it is not a directory");
  try {
    await mkdir(dataDir, { recursive: true, mode: 0o700 });
    await mkdir(dir, { recursive: true, mode: 0o700 });
    await chmod(dir, 0o700); // PGlite creates its files world-readable; the directory keeps them private
  } catch (err) {
    throw new DatabaseOpenError(`cannot create embedded database directory ${dir}: ${describeCause(err)}`, {
      kind: "pglite",
      cause: err,
    });
  }

  const release = await lockDataDir(`${dir}.lock`, dir);
  let db: PGlite | undefined;
  try {
    await preflightPgliteDir(dir, dir);

    const serverLog = new ServerLog();
    try {
      db = new PGlite({ dataDir: dir, onStderr: serverLog.add, onStdout: serverLog.add });
      await db.waitReady;
    } catch (err) {
      throw damaged(serverLog.cause() ?? describeCause(err), err);
    }
    if (serverLog.has(/not properly shut down/)) {
      opts.log?.warn({ db: describe }, "embedded database was not shut down cleanly; PostgreSQL recovered it");
    }

    let migrationsApplied: string[];
    try {
      migrationsApplied = await migrate(pgliteExecutor(db), {
        ...(opts.migrationsDir !== undefined ? { migrationsDir: opts.migrationsDir } : {}),
        ...(opts.log ? { log: opts.log } : {}),
      });
    } catch (err) {
      if (err instanceof MigrationError) {
        throw new DatabaseOpenError(`${err.message} (embedded database at ${dir})`, { kind: "pglite", cause: err });
      }
      // A WebAssembly abort says only "Aborted()"; PostgreSQL's log says why.
      const cause = err instanceof WebAssembly.RuntimeError ? serverLog.cause() : undefined;
      throw damaged(cause ?? describeCause(err), err);
    }

    const prisma = new PrismaClient({ adapter: new PrismaPGlite(db) });
    try {
      await checkConnection(prisma, opts.log, describe);
    } catch (err) {
      await prisma.$disconnect().catch(() => undefined);
      throw damaged(describeCause(err), err);
    }

    const pglite = db;
    const outage = new OutageMonitor(() => prisma.$queryRaw`SELECT 1`, opts.log, describe);
    const close = once(async () => {
      outage.close();
      await prisma.$disconnect().catch(() => undefined);
      await pglite.close().catch((err: unknown) => {
        opts.log?.warn({ db: describe, err: describeCause(err) }, "closing the embedded database failed");
      });
      await release();
    });
    opts.log?.info({ backend: "pglite", db: describe, migrationsApplied, ms: Date.now() - started }, "database ready");
    return { prisma, kind: "pglite", describe, migrationsApplied, outage, close };
  } catch (err) {
    if (db) await closeQuietly(db);
    await release();
    if (err instanceof DatabaseOpenError) throw err;
    throw damaged(describeCause(err), err);
  }
}

// ---------------------------------------------------------------------------------------------

/** A round trip through Prisma and the adapter; warns if the session is not on UTC. */
async function checkConnection(prisma: PrismaClient, log: DbLogger | undefined, describe: string): Promise<void> {
  const rows = await prisma.$queryRaw<{ tz: string }[]>`SELECT current_setting('TimeZone') AS tz`;
  const tz = rows[0]?.tz;
  if (tz !== "UTC" && tz !== "Etc/UTC") {
    log?.warn({ db: describe, timeZone: tz }, "database session time zone is not UTC; stored timestamps may be shifted");
  }
}

function once(fn: () => Promise<void>): () => Promise<void> {
  let p: Promise<void> | undefined;
  return () => (p ??= fn());
}
