// The session-open read runs straight on the driver (server/db/direct.ts), so nothing of Prisma's
// typing stands between the row and the session: the node it returns must be the node Prisma
// reads, value for value and type for type (Date, parsed JSON, arrays, nulls), on the backend
// under test (the suite runs once on PGlite, once on PostgreSQL), and every refusal the same.
import { randomUUID } from "node:crypto";
import { Code, ConnectError } from "@connectrpc/connect";
import { describe, expect, it } from "vitest";
import { OpeningReads } from "../../server/sessions/open.js";
import { useTestDatabase } from "../support/db.js";
import { freePort } from "../support/ports.js";
import pg from "pg";
import { PGlite } from "@electric-sql/pglite";
import { pgDirect, type DirectQuery, type DirectStatement } from "../../server/db/direct.js";
import { pgliteDirect } from "../../server/db/pglite-direct.js";
import { unavailableError } from "../../server/db/availability.js";

const now = new Date("2026-12-01T12:00:00.123Z");
const later = new Date(now.getTime() + 86_400_000);

/** What the query error hook heard. */
const failed: unknown[] = [];
const t = useTestDatabase({ preparedStatements: 10, queryFailed: (err) => failed.push(err) });

/** A node with one credential; `node` and `credential` override the defaults. */
async function nodeWith(node: Record<string, unknown> = {}, credential: { revokedAt?: Date; expiresAt?: Date } = {}) {
  const id = randomUUID();
  const serial = randomUUID().replaceAll("-", "").toUpperCase();
  await t.db.prisma.node.create({ data: { id, name: `gpu-${id.slice(0, 8)}`, ...node } });
  await t.db.prisma.nodeCredential.create({ data: { serial, nodeId: id, expiresAt: later, ...credential } });
  return { id, serial, identity: { nodeId: id, serial, certificateExpiresAt: later.getTime() } };
}

async function refusal(promise: Promise<unknown>): Promise<{ code: string; message: string }> {
  const err = await promise.then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(err).toBeInstanceOf(ConnectError);
  return { code: Code[(err as ConnectError).code], message: (err as ConnectError).rawMessage };
}

const refusals = [
  {
    name: "an unknown serial",
    make: async () => ({ ...(await nodeWith()).identity, serial: "ABCDEF" }),
    code: "Unauthenticated",
    message: "credential unknown",
  },
  {
    name: "another node's credential",
    make: async () => ({ ...(await nodeWith()).identity, nodeId: randomUUID() }),
    code: "Unauthenticated",
    message: "credential unknown",
  },
  {
    name: "a revoked credential",
    make: async () => (await nodeWith({}, { revokedAt: now })).identity,
    code: "Unauthenticated",
    message: "credential revoked",
  },
  {
    name: "an expired credential",
    make: async () => (await nodeWith({}, { expiresAt: now })).identity,
    code: "Unauthenticated",
    message: "credential expired",
  },
  {
    name: "a disabled node",
    make: async () => (await nodeWith({ disabledAt: now, disabledReason: "maintenance" })).identity,
    code: "PermissionDenied",
    message: "node disabled: maintenance",
  },
  {
    name: "a decommissioned node",
    make: async () => (await nodeWith({ decommissionedAt: now })).identity,
    code: "PermissionDenied",
    message: "node decommissioned",
  },
];

describe("session-open read", () => {
  it("returns the node Prisma reads, with every column's type, its cursors and its unfinished jobs", async () => {
    const { id, identity } = await nodeWith({
      labels: { rack: "r7", zone: "b" },
      lastHeartbeatAt: new Date("2026-12-01T11:59:58.001Z"),
      liveness: "online",
      agentVersion: "1.4.2",
      protocolVersion: 1,
      capabilities: ["artifact.acquire.v1", "deployment.load.v1"],
      engines: ["llama.cpp"],
      host: { hostname: "gpu-a", cpus: 64, gpus: [{ model: "L4", memoryBytes: "24000000000" }] },
      renewalRequestedAt: new Date("2026-11-30T00:00:00.000Z"),
      renewalReason: "rotate",
      sessionReplica: "replica-a",
    });
    // Beyond 2^53: the cursor must survive as the exact integer, not a rounded double.
    for (const [stream, sequence] of [
      ["inventory", 9_007_199_254_740_993n],
      ["telemetry", 42n],
    ] as const)
      await t.db.prisma.streamCursor.create({ data: { nodeId: id, stream, sequence, receivedAt: now } });
    await t.db.prisma.job.create({ data: { id: randomUUID(), nodeId: id, capability: "artifact.acquire.v1", spec: {}, state: "leased" } });

    const state = await new OpeningReads(t.db.direct).read(identity, now);
    const stored = await t.db.prisma.node.findUniqueOrThrow({ where: { id } });
    expect(state.node).toStrictEqual(stored);
    expect(state.node.createdAt).toBeInstanceOf(Date);
    expect(state.cursors).toStrictEqual({ inventory: 9_007_199_254_740_993n, telemetry: 42n });
    expect(state.hasJobs).toBe(true);
  });

  it("reads a node never heard from: nulls, empty lists, no cursors, no jobs", async () => {
    const { id, identity } = await nodeWith();
    const state = await new OpeningReads(t.db.direct).read(identity, now);
    expect(state.node).toStrictEqual(await t.db.prisma.node.findUniqueOrThrow({ where: { id } }));
    expect(state.node).toMatchObject({
      labels: {},
      capabilities: [],
      engines: [],
      host: null,
      lastHeartbeatAt: null,
      protocolVersion: null,
    });
    expect(state).toMatchObject({ cursors: {}, hasJobs: false });
  });

  it.each([
    { state: "pending", hasJobs: true },
    { state: "leased", hasJobs: true },
    { state: "succeeded", hasJobs: false },
    { state: "failed", hasJobs: false },
    { state: "cancelled", hasJobs: false },
  ])("a $state job: hasJobs $hasJobs", async ({ state, hasJobs }) => {
    const { id, identity } = await nodeWith();
    await t.db.prisma.job.create({ data: { id: randomUUID(), nodeId: id, capability: "artifact.acquire.v1", spec: {}, state } });
    expect((await new OpeningReads(t.db.direct).read(identity, now)).hasJobs).toBe(hasJobs);
  });

  it.each(refusals)("refuses $name", async ({ make, code, message }) => {
    expect(await refusal(new OpeningReads(t.db.direct).read(await make(), now))).toEqual({ code, message });
  });

  // An agent told `unavailable` retries; any other code would make it back off as from a refusal.
  it("is answered unavailable when PostgreSQL cannot be reached, as through Prisma", async () => {
    const pool = new pg.Pool({ host: "127.0.0.1", port: await freePort(), user: "postgres", connectionTimeoutMillis: 5_000 });
    const heard: unknown[] = [];
    try {
      const err = await new OpeningReads(pgDirect(pool, { prepare: true, failed: (e) => heard.push(e) }))
        .read((await nodeWith()).identity, now)
        .then(
          () => undefined,
          (e: unknown) => e,
        );
      expect(unavailableError(err)?.code).toBe(Code.Unavailable);
      expect(heard).toEqual([err]);
    } finally {
      await pool.end();
    }
  });

  it("is answered unavailable when the embedded database is closed", async () => {
    const closed = new PGlite();
    await closed.close();
    const err = await new OpeningReads(pgliteDirect(closed, {})).read((await nodeWith()).identity, now).then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(unavailableError(err)?.code).toBe(Code.Unavailable);
  });

  it("reports a failed statement to the query error hook and rethrows it unchanged", async () => {
    failed.length = 0;
    const err = await t.db.direct({ name: "mf_test_broken", text: 'SELECT no_such_column FROM "Node"' }, []).then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(err).toMatchObject({ message: expect.stringContaining("no_such_column") });
    expect(failed).toEqual([err]);
  });
});

describe("session-open reads batched", () => {
  /** t.db.direct, counting statements and the most in flight at once; `fail` fails the n-th statement. */
  function counted(fail?: number) {
    const seen = { statements: 0, inFlight: 0, maxInFlight: 0, sizes: [] as number[] };
    const query: DirectQuery = async <Row>(statement: DirectStatement, values: readonly unknown[]) => {
      seen.statements++;
      seen.sizes.push((values[0] as string[]).length);
      seen.inFlight++;
      seen.maxInFlight = Math.max(seen.maxInFlight, seen.inFlight);
      try {
        if (seen.statements === fail) throw new Error("connection lost");
        return await t.db.direct<Row>(statement, values);
      } finally {
        seen.inFlight--;
      }
    };
    return { query, seen };
  }

  it("reads the opens waiting together in one statement, and answers each its own node or refusal", async () => {
    const { query, seen } = counted();
    const reads = new OpeningReads(query, { batch: 100, concurrent: 1 });
    const good = await Promise.all(Array.from({ length: 4 }, () => nodeWith()));
    const refused = await Promise.all(refusals.map(async (r) => ({ ...r, identity: await r.make() })));
    const first = reads.read(good[0]!.identity, now);
    // The same credential twice (an agent and a stale copy of it): both are answered.
    const rest = [...good, good[1]!].slice(1).map((g) => reads.read(g.identity, now));
    const refusedAnswers = refused.map((r) => refusal(reads.read(r.identity, now)));
    const nodes = await Promise.all([first, ...rest]);
    expect(nodes.map((n) => n.node.id)).toEqual([good[0]!.id, good[1]!.id, good[2]!.id, good[3]!.id, good[1]!.id]);
    expect(await Promise.all(refusedAnswers)).toEqual(refused.map(({ code, message }) => ({ code, message })));
    // The first went alone, at once; everything that came while it ran, together (the repeated serial once).
    expect(seen.sizes).toEqual([1, 3 + refused.length]);
  });

  it("splits at the batch limit and keeps at most `concurrent` statements in flight", async () => {
    const { query, seen } = counted();
    const reads = new OpeningReads(query, { batch: 3, concurrent: 2 });
    const made = await Promise.all(Array.from({ length: 10 }, () => nodeWith()));
    const states = await Promise.all(made.map((m) => reads.read(m.identity, now)));
    expect(states.map((s) => s.node.id)).toEqual(made.map((m) => m.id));
    expect(seen.sizes).toEqual([1, 1, 3, 3, 2]);
    expect(seen.maxInFlight).toBe(2);
  });

  it("fails every open a failed statement carried, and reads the next batch as usual", async () => {
    const { query, seen } = counted(2);
    const reads = new OpeningReads(query, { batch: 100, concurrent: 1 });
    const made = await Promise.all(Array.from({ length: 4 }, () => nodeWith()));
    const answers = made.map((m) =>
      reads.read(m.identity, now).then(
        (s) => s.node.id,
        (e: unknown) => (e as Error).message,
      ),
    );
    expect(await Promise.all(answers)).toEqual([made[0]!.id, "connection lost", "connection lost", "connection lost"]);
    expect((await reads.read(made[3]!.identity, now)).node.id).toBe(made[3]!.id);
    expect(seen.sizes).toEqual([1, 3, 1]);
  });
});
