// The embedded backend: PGlite (PostgreSQL compiled to WebAssembly, in-process) through
// pglite-prisma-adapter, which drives the PGlite instance directly with no socket in between.
// (The alternative, @prisma/adapter-pg over @electric-sql/pglite-socket, would add a dependency
// and a socket hop for nothing.) PGlite is one PostgreSQL session: every query and transaction
// runs one after another. Two consequences for callers: read-modify-write races that happen on a
// real server cannot happen here (test on both backends), and code inside
// `prisma.$transaction(async (tx) => ...)` must use `tx`, never the outer `prisma`, which would
// wait for the transaction to end (a deadlock until Prisma's transaction timeout, 5 s by default).
import { chmod, mkdir, stat } from "node:fs/promises";
import { join, resolve } from "node:path";
import { PGlite } from "@electric-sql/pglite";
import { PrismaPGlite } from "pglite-prisma-adapter";
import { PrismaClient } from "../../gen/prisma/client.js";
import { DatabaseOpenError, MigrationError, describeCause } from "./errors.js";
import { migrate, pgliteExecutor } from "./migrate.js";
import { OutageMonitor } from "./outage-monitor.js";
import { checkConnection, once, type Database, type OpenDatabaseOptions } from "./database.js";
import { lockDataDir, preflightPgliteDir } from "./pglite-dir.js";
import { ServerLog } from "./pglite-log.js";
import { watchQueries } from "./query-watch.js";
import { pgliteDirect } from "./pglite-direct.js";
import { preparedPglite } from "./pglite-prepared.js";
import { statementNames } from "./statement-names.js";

/** Texts kept prepared when the caller sets no number (the server passes its configured one). */
const DEFAULT_PREPARED = 100;

/**
 * Awaited before each statement. PGlite runs a statement in this thread, and the statements of a
 * sequence (a sweep's ten reads, one after another) are chained by promises alone, so the event
 * loop took no turn between them: a request that arrived meanwhile waited for the whole sequence.
 * On an idle fleet of one node the periodic loops held it 10 to 50 ms at a time, several times a
 * second. With a turn before each statement a request waits for one statement at most.
 */
const turn = () => new Promise<void>((resolve) => setImmediate(resolve));

async function closeQuietly(db: PGlite): Promise<void> {
  // After a WebAssembly abort close() may throw or never settle; do not let it hold shutdown.
  await Promise.race([db.close().catch(() => undefined), new Promise((r) => setTimeout(r, 1000).unref())]);
}

export async function openPglite(opts: OpenDatabaseOptions): Promise<Database> {
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

    const limit = opts.preparedStatements ?? DEFAULT_PREPARED;
    const prepared = preparedPglite(db, statementNames({ limit }));
    const prisma = new PrismaClient({ adapter: watchQueries(new PrismaPGlite(prepared), { failed: opts.queryFailed, before: turn }) });
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
    return {
      prisma,
      direct: pgliteDirect(pglite, { failed: opts.queryFailed, before: turn }, limit > 0),
      kind: "pglite",
      describe,
      migrationsApplied,
      outage,
      close,
    };
  } catch (err) {
    if (db) await closeQuietly(db);
    await release();
    if (err instanceof DatabaseOpenError) throw err;
    throw damaged(describeCause(err), err);
  }
}
