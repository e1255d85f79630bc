// What an open database is, the options for opening one, and what both openers share.
import type { PrismaClient } from "../../gen/prisma/client.js";
import type { DirectQuery } from "./direct.js";
import type { MigrationLogger } from "./migrate.js";
import type { OutageMonitor } from "./outage-monitor.js";

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
  /**
   * How many statement texts may be kept prepared on each PostgreSQL connection, or on the embedded
   * database (./statement-names.ts; 0: none). Unset: none on PostgreSQL, 100 on PGlite (no pooler there).
   */
  preparedStatements?: number | undefined;
  /** Hears of every statement that fails (the query error metrics). */
  queryFailed?: ((err: unknown) => void) | undefined;
}

/** PostgreSQL connect timeout when the options give none. */
export const DEFAULT_CONNECT_TIMEOUT_MS = 5_000;

export interface Database {
  prisma: PrismaClient;
  /** The same database straight through its driver, for the few reads too hot for Prisma's runtime (./direct.ts). */
  direct: DirectQuery;
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

/** A round trip through Prisma and the adapter; warns if the session is not on UTC. */
export async function checkConnection(prisma: PrismaClient, log: DbLogger | undefined, describe: string): Promise<void> {
  const rows = await prisma.$queryRaw<{ tz: string }[]>`SELECT current_setting('TimeZone') AS tz`;
  const tz = rows[0]?.tz;
  if (tz !== "UTC" && tz !== "Etc/UTC") {
    log?.warn({ db: describe, timeZone: tz }, "database session time zone is not UTC; stored timestamps may be shifted");
  }
}

export function once(fn: () => Promise<void>): () => Promise<void> {
  let p: Promise<void> | undefined;
  return () => (p ??= fn());
}
