// Which failures mean "database unavailable: retry" (server/db/availability.ts), over errors the
// real drivers raise here (a closed port, a silent and a resetting listener, an exhausted pool, a
// closed PGlite) and the shapes Prisma gave for the rest in the outage drill (57P01 on a fast
// shutdown); how they reach the wire (call-log's publicError); the outage monitor's two lines;
// and the agent's reading of refusals and retry hints.
import { afterAll, describe, expect, it } from "vitest";
import { createServer, type Server } from "node:net";
import { Writable } from "node:stream";
import pg from "pg";
import { PGlite } from "@electric-sql/pglite";
import { PrismaPGlite } from "pglite-prisma-adapter";
import { PrismaPg } from "@prisma/adapter-pg";
import { Code, ConnectError } from "@connectrpc/connect";
import { PrismaClient } from "../../gen/prisma/client.js";
import { DATABASE_UNAVAILABLE, isDatabaseUnavailable } from "../../server/db/availability.js";
import { OutageMonitor } from "../../server/db/outage-monitor.js";
import { publicError } from "../../server/observability/call-log.js";
import { createLogger } from "../../server/observability/logger.js";
import { refusalVerdict } from "../../agent/jobs/runner.js";
import { retryAfterDelay } from "../../agent/session/timing.js";
import { eventually } from "../support/node.js";

const closers: (() => Promise<unknown>)[] = [];
afterAll(async () => {
  for (const c of closers.splice(0).reverse()) await c().catch(() => undefined);
});

async function listener(onConnection: (s: import("node:net").Socket) => void): Promise<number> {
  const sockets = new Set<import("node:net").Socket>();
  const server: Server = createServer((s) => {
    sockets.add(s);
    onConnection(s);
  });
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  closers.push(() => {
    for (const s of sockets) s.destroy();
    return new Promise((r) => server.close(r));
  });
  return (server.address() as { port: number }).port;
}

async function closedPort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  const port = (server.address() as { port: number }).port;
  await new Promise((r) => server.close(r));
  return port;
}

/** A Prisma client over pg at `port`, and the error of its first query. */
async function failureAt(port: number, pool: Partial<pg.PoolConfig> = {}): Promise<unknown> {
  const p = new pg.Pool({ connectionString: `postgresql://postgres@127.0.0.1:${port}/x`, max: 1, connectionTimeoutMillis: 300, ...pool });
  p.on("error", () => undefined);
  const prisma = new PrismaClient({ adapter: new PrismaPg(p) });
  closers.push(async () => {
    await prisma.$disconnect();
    await p.end();
  });
  return prisma.node.count().then(
    () => undefined,
    (err: unknown) => err,
  );
}

const adapterError = (cause: Record<string, unknown>, code = "P2010") =>
  Object.assign(new Error("\nInvalid `prisma.$queryRaw()` invocation:\n\nRaw query failed."), {
    code,
    meta: { driverAdapterError: { name: "DriverAdapterError", cause } },
  });

describe("database connectivity failures", () => {
  it("are recognised in the errors the drivers raise", async () => {
    const refused = await failureAt(await closedPort());
    expect(refused).toMatchObject({ code: "P1001" });
    const silent = await failureAt(await listener(() => undefined));
    expect((silent as Error).message).toMatch(/Connection terminated due to connection timeout/);
    const reset = await failureAt(await listener((s) => s.destroy()));
    expect((reset as Error).message).toMatch(/Connection terminated unexpectedly/);
    for (const err of [refused, silent, reset]) expect(isDatabaseUnavailable(err), String(err)).toBe(true);
  });

  it("include an exhausted pool", async () => {
    // A pool of one whose connection is taken: the next query waits for a connection, then times out.
    const port = await listener(() => undefined);
    const p = new pg.Pool({ connectionString: `postgresql://postgres@127.0.0.1:${port}/x`, max: 1, connectionTimeoutMillis: 200 });
    p.on("error", () => undefined);
    const prisma = new PrismaClient({ adapter: new PrismaPg(p) });
    closers.push(async () => {
      await prisma.$disconnect();
      await p.end();
    });
    const first = prisma.node.count().catch((e: unknown) => e);
    const second = await prisma.node.count().catch((e: unknown) => e);
    await first;
    expect([(second as Error).message]).toEqual([expect.stringMatching(/timeout exceeded when trying to connect|Connection terminated/)]);
    expect(isDatabaseUnavailable(second)).toBe(true);
  });

  it("include a closed embedded database", async () => {
    const db = new PGlite();
    const prisma = new PrismaClient({ adapter: new PrismaPGlite(db) });
    await prisma.$queryRaw`SELECT 1`;
    await db.close();
    const err = await prisma.$queryRaw`SELECT 1`.catch((e: unknown) => e);
    expect((err as Error).message).toBe("PGlite is closed");
    expect(isDatabaseUnavailable(err)).toBe(true);
  });

  it("include a transaction that could not start in time, and not one that expired while it ran", async () => {
    // The embedded database runs one transaction at a time: while one is held, the next waits past its maxWait.
    const db = new PGlite();
    const prisma = new PrismaClient({ adapter: new PrismaPGlite(db) });
    closers.push(async () => {
      await prisma.$disconnect();
      await db.close();
    });
    let release: (() => void) | undefined;
    const held = prisma.$transaction(async (tx) => {
      await tx.$queryRaw`SELECT 1`;
      await new Promise<void>((r) => (release = r));
    });
    await eventually(() => expect(release).toBeDefined());
    const waited = await prisma.$transaction(async (tx) => tx.$queryRaw`SELECT 1`, { maxWait: 100 }).catch((e: unknown) => e);
    release!();
    await held;
    expect(waited).toMatchObject({ code: "P2028", message: expect.stringContaining("Unable to start a transaction in the given time") });
    expect(isDatabaseUnavailable(waited)).toBe(true);
    // One that began and ran past its timeout did its work inside a transaction that was rolled
    // back: not the database's absence, so not "retry".
    const expired = await prisma
      .$transaction(
        async (tx) => {
          await new Promise((r) => setTimeout(r, 300));
          await tx.$queryRaw`SELECT 1`;
        },
        { timeout: 100 },
      )
      .catch((e: unknown) => e);
    expect(expired).toMatchObject({ code: "P2028" });
    expect(isDatabaseUnavailable(expired)).toBe(false);
  });

  it.each([
    ["P1001 can't reach (adapter kind)", adapterError({ kind: "DatabaseNotReachable", host: "127.0.0.1", port: 5432 }, "P1001"), true],
    ["P2010 raw query, server unreachable", adapterError({ kind: "DatabaseNotReachable" }), true],
    ["P2010 57P01 admin shutdown", adapterError({ originalCode: "57P01", kind: "postgres", code: "57P01", severity: "FATAL" }), true],
    ["57P03 cannot connect now", adapterError({ originalCode: "57P03", kind: "postgres", code: "57P03" }), true],
    ["08006 connection failure", adapterError({ originalCode: "08006", kind: "postgres", code: "08006" }), true],
    ["connection closed (ECONNRESET)", adapterError({ kind: "ConnectionClosed" }, "P1017"), true],
    ["too many connections", adapterError({ kind: "TooManyConnections", cause: "53300" }), true],
    [
      "P2024 pool timeout",
      Object.assign(new Error("Timed out fetching a new connection from the connection pool."), { code: "P2024" }),
      true,
    ],
    ["raw ECONNREFUSED", Object.assign(new Error("connect ECONNREFUSED 127.0.0.1:5432"), { code: "ECONNREFUSED" }), true],
    ["AggregateError of refusals", new AggregateError([Object.assign(new Error("x"), { code: "ECONNREFUSED" })], ""), true],
    ["pool ended during shutdown", new Error("Cannot use a pool after calling end on the pool"), true],
    ["wrapped in a cause", new Error("flush failed", { cause: new Error("PGlite is closed") }), true],
    ["syntax error 42601", adapterError({ originalCode: "42601", kind: "postgres", code: "42601" }), false],
    ["division by zero 22012", adapterError({ originalCode: "22012", kind: "postgres", code: "22012" }), false],
    ["database does not exist 3D000", adapterError({ originalCode: "3D000", kind: "DatabaseDoesNotExist" }), false],
    ["unique violation P2002", Object.assign(new Error("Unique constraint failed"), { code: "P2002" }), false],
    ["a bug", new TypeError("cannot read properties of undefined"), false],
    ["a message that only mentions a timeout", Object.assign(new Error("Connection terminated"), { code: "XX000" }), false],
    ["not an error", "ECONNREFUSED", false],
  ])("%s: %s", (_name, err, unavailable) => {
    expect(isDatabaseUnavailable(err)).toBe(unavailable);
  });
});

describe("what a failure becomes on the wire", () => {
  it.each([
    ["a database outage", adapterError({ kind: "DatabaseNotReachable" }, "P1001"), Code.Unavailable, DATABASE_UNAVAILABLE, "debug"],
    ["a refusal", new ConnectError("job x not found", Code.NotFound), Code.NotFound, "job x not found", "warn"],
    ["a bug", new Error("boom"), Code.Internal, "internal error (request r1)", "error"],
    ["an unknown ConnectError", ConnectError.from(new Error("boom")), Code.Internal, "internal error (request r1)", "error"],
  ])("%s", (_name, err, code, message, level) => {
    const out = publicError(err, "r1");
    expect([Code[out.error.code], out.error.rawMessage, out.level]).toEqual([Code[code], message, level]);
  });

  it("tells the outage monitor of a connectivity failure, and of nothing else", () => {
    const heard: unknown[] = [];
    const sink = {
      failed: (e: unknown) => {
        heard.push(e);
        return true;
      },
    };
    const outage = adapterError({ kind: "DatabaseNotReachable" }, "P1001");
    publicError(outage, "r1", sink);
    publicError(new Error("boom"), "r1", sink);
    publicError(new ConnectError("nope", Code.NotFound), "r1", sink);
    expect(heard).toEqual([outage]);
  });
});

describe("the outage monitor", () => {
  it("logs one line when the database is lost and one when it is back, and ignores other errors", async () => {
    const lines: string[] = [];
    const log = createLogger(
      "debug",
      new Writable({
        write(chunk: Buffer, _e, cb) {
          lines.push(chunk.toString());
          cb();
        },
      }),
    );
    let up = false;
    const monitor = new OutageMonitor(() => (up ? Promise.resolve() : Promise.reject(new Error("PGlite is closed"))), log, "test db", 20);
    closers.push(async () => monitor.close());
    const outage = adapterError({ kind: "DatabaseNotReachable" }, "P1001");
    expect(monitor.failed(new Error("boom"))).toBe(false);
    for (let i = 0; i < 50; i++) expect(monitor.failed(outage)).toBe(true);
    expect(monitor.lost).toBe(true);
    up = true;
    await eventually(() => !monitor.lost, 5_000, "the monitor to see the database back");
    const text = lines.join("");
    expect(text.match(/database lost/g)).toHaveLength(1);
    expect(text.match(/"msg":"database back"/g)).toHaveLength(1);
    expect(text).toMatch(/"outageMs":\d+/);
    expect(text).not.toMatch(/Invalid `prisma/);
  });
});

describe("the agent", () => {
  it.each([
    ["aborted", "lost"],
    ["not_found", "lost"],
    ["permission_denied", "lost"],
    ["failed_precondition", "lost"],
    ["invalid_argument", "refused"],
    ["unavailable", "retry"],
    ["internal", "retry"],
    ["unknown", "retry"],
    ["resource_exhausted", "retry"],
  ])("reads a %s refusal of a job report as %s", (code, verdict) => {
    expect(refusalVerdict(code)).toBe(verdict);
  });

  it.each([
    ["1", 30_000, 0, 500],
    ["1", 30_000, 0.999, 999],
    ["5", 2_000, 0.999, 1_999],
    [" 2 ", 30_000, 0, 1_000],
    [null, 30_000, 0.5, undefined],
    ["soon", 30_000, 0.5, undefined],
    ["Wed, 21 Oct 2015 07:28:00 GMT", 30_000, 0.5, undefined],
    ["-1", 30_000, 0.5, undefined],
  ])("waits for Retry-After %s (max %d, random %d): %s ms", (header, max, random, delay) => {
    expect(retryAfterDelay(header, max, () => random)).toBe(delay);
  });
});
