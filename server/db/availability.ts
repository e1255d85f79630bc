// Whether an error means "the database cannot be reached right now" (a restart, a failover, a
// network blip, a full pool) rather than "this request is wrong" or "this is a bug". Such an
// error is answered `unavailable` ("database unavailable: retry"): the caller may safely retry,
// and an agent keeps its jobs running. One classification for the whole server. What the invoke
// path has read recently (service keys, routes, session holders) is answered from its caches
// instead, through `staleWhileDatabaseAway`.
//
// The shapes differ by layer, and all were seen on these machines (test/database/db-availability.test.ts
// produces them): Prisma wraps most driver failures in PrismaClientKnownRequestError (P1001
// "Can't reach database server", P2010 with `meta.driverAdapterError.cause` naming a kind or a
// SQLSTATE such as 57P01 "terminating connection due to administrator command"); pg and pg-pool
// failures outside a query escape unwrapped as plain Errors with no code ("timeout exceeded when
// trying to connect", "Connection terminated unexpectedly"); PGlite after close says "PGlite is
// closed".
import { Code, ConnectError } from "@connectrpc/connect";
import type { StaleAnswers } from "../../common/lookup-cache.js";

export const DATABASE_UNAVAILABLE = "database unavailable: retry";

/** Prisma's own codes for an unreachable server, a lost connection and an exhausted pool. */
const prismaCodes = new Set(["P1001", "P1002", "P1008", "P1017", "P2024"]);

/** Socket errno names of a connection that could not be made or was lost. */
const socketCodes = new Set(["ECONNREFUSED", "ECONNRESET", "ETIMEDOUT", "EPIPE", "EHOSTUNREACH", "ENETUNREACH", "ENOTFOUND", "EAI_AGAIN"]);

/**
 * SQLSTATEs other than class 08 (connection exception): the server shutting down or starting
 * (57P01 admin_shutdown, 57P02 crash_shutdown, 57P03 cannot_connect_now), a session ended by an
 * idle timeout (57P05), and too many connections (53300).
 */
const sqlStates = new Set(["57P01", "57P02", "57P03", "57P05", "53300"]);

/** @prisma/adapter-pg's kinds for the same failures. */
const adapterKinds = new Set(["DatabaseNotReachable", "ConnectionClosed", "SocketTimeout", "TooManyConnections"]);

/**
 * Prisma's P2028 is any interactive transaction's trouble; only "could not start in the given time"
 * means no connection came (a pool or the embedded database's one connection held past maxWait).
 */
const transactionNotStarted = /Unable to start a transaction in the given time/;

/** Messages of pg, pg-pool and PGlite errors that carry no code. */
const messages = [
  /^timeout exceeded when trying to connect$/,
  /^Connection terminated\b/,
  /^Client has encountered a connection error and is not queryable$/,
  /^Client was closed and is not queryable$/,
  /^Cannot use a pool after calling end on the pool$/,
  /^PGlite is closed$/,
];

/** True when `err`, or anything it wraps, says the database could not be reached. */
export function isDatabaseUnavailable(err: unknown): boolean {
  return search(err, 0);
}

function search(err: unknown, depth: number): boolean {
  if (depth > 6 || typeof err !== "object" || err === null) return false;
  const e = err as {
    code?: unknown;
    originalCode?: unknown;
    kind?: unknown;
    message?: unknown;
    cause?: unknown;
    meta?: unknown;
    errors?: unknown;
  };
  for (const code of [e.code, e.originalCode]) {
    if (typeof code !== "string") continue;
    if (prismaCodes.has(code) || socketCodes.has(code) || sqlStates.has(code) || /^08[0-9A-Z]{3}$/.test(code)) return true;
    if (code === "P2028" && typeof e.message === "string" && transactionNotStarted.test(e.message)) return true;
  }
  if (typeof e.kind === "string" && adapterKinds.has(e.kind)) return true;
  if (typeof e.message === "string" && e.code === undefined && messages.some((m) => m.test(e.message as string))) return true;
  const meta = e.meta as { driverAdapterError?: unknown } | undefined;
  const inner = [e.cause, meta?.driverAdapterError, ...(Array.isArray(e.errors) ? e.errors : [])];
  return inner.some((i) => search(i, depth + 1));
}

/** Where connectivity failures are reported (./outage-monitor.ts); true when it took the error. */
export interface OutageSink {
  failed(err: unknown): boolean;
}

/** An OutageSink that also says whether an outage is in progress. */
export interface OutageWatch extends OutageSink {
  readonly lost: boolean;
}

/** The answer for a database connectivity failure, or undefined when `err` is something else. */
export function unavailableError(err: unknown): ConnectError | undefined {
  if (err instanceof ConnectError || !isDatabaseUnavailable(err)) return undefined;
  return new ConnectError(DATABASE_UNAVAILABLE, Code.Unavailable);
}

/**
 * For a cache of database reads (common/lookup-cache.ts): while the database cannot be reached,
 * answer what was read within the last `forMs`. A failure is reported to `outage`, which then
 * knows the database is lost, and while it is, the cache does not try the database at all.
 */
export function staleWhileDatabaseAway(forMs: number, outage?: OutageWatch): StaleAnswers {
  return {
    forMs,
    unreachable: (err) => (outage !== undefined ? outage.failed(err) : isDatabaseUnavailable(err)),
    known: () => outage?.lost ?? false,
  };
}
