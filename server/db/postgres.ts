// PostgreSQL through @prisma/adapter-pg: connect, migrate under the advisory lock, check, and
// report a failed open as one line that never holds a password.
import { PrismaPg } from "@prisma/adapter-pg";
import pg from "pg";
import { PrismaClient } from "../../gen/prisma/client.js";
import { DatabaseOpenError, MigrationError, describeCause, errorCode } from "./errors.js";
import { migrate, pgExecutor } from "./migrate.js";
import { OutageMonitor } from "./outage-monitor.js";
import { checkConnection, DEFAULT_CONNECT_TIMEOUT_MS, once, type Database, type OpenDatabaseOptions } from "./database.js";
import { parsePostgresUrl, redact } from "./postgres-url.js";
import { watchQueries } from "./query-watch.js";
import { statementNames } from "./statement-names.js";
import { pgDirect } from "./direct.js";

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

export async function openPostgres(rawUrl: string, opts: OpenDatabaseOptions): Promise<Database> {
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
  const statementNameGenerator = statementNames({ limit: opts.preparedStatements ?? 0 });
  const prisma = new PrismaClient({ adapter: watchQueries(new PrismaPg(pool, { statementNameGenerator }), { failed: opts.queryFailed }) });
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
  const direct = pgDirect(pool, { prepare: (opts.preparedStatements ?? 0) > 0, failed: opts.queryFailed });
  return { prisma, direct, kind: "postgres", describe, migrationsApplied, outage, close };
}
