// Jobs across control-plane processes: a server killed mid-job (SIGKILL) and restarted on the same
// database loses nothing, and two server processes on one PostgreSQL never lease a job twice.
import { afterEach, describe, expect, it } from "vitest";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import pg from "pg";
import { JobState } from "../../gen/proto/modelforge/admin/v1/admin_pb.js";
import type { JobLease } from "../../gen/proto/modelforge/jobs/v1/jobs_pb.js";
import { nodeClient } from "../../agent/session/transport.js";
import { CapabilityRegistry, type JobHandler } from "../../agent/jobs/index.js";
import { createTestDatabase, DEFAULT_TEST_POSTGRES_URL, type TestDatabase } from "../support/db.js";
import { eventually } from "../support/node.js";
import { spawnServer, type ServerProcess } from "../support/process.js";
import { adminClientAt, enrollAt, startAgent, type InProcessAgent } from "../support/agent.js";
import { freePort } from "../support/ports.js";

const key = "test-admin-key-0123456789abcdef";
const cleanups: (() => Promise<unknown>)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c().catch(() => undefined);
});

function serverEnv(db: TestDatabase, certs: string, port: number, extra: Record<string, string> = {}): Record<string, string> {
  return {
    MODELFORGE_PORT: String(port),
    MODELFORGE_DATA_DIR: db.dataDir,
    MODELFORGE_CERTS_DIR: certs,
    MODELFORGE_OPERATOR_API_KEY: key,
    MODELFORGE_LOG_LEVEL: "info",
    MODELFORGE_LIVENESS_FLUSH_INTERVAL: "100ms",
    MODELFORGE_RECONCILE_INTERVAL: "100ms",
    MODELFORGE_SHUTDOWN_GRACE: "1s",
    ...(db.databaseUrl !== undefined ? { DATABASE_URL: db.databaseUrl } : {}),
    ...extra,
  };
}

async function start(env: Record<string, string>): Promise<{ proc: ServerProcess; url: string }> {
  const proc = spawnServer(env);
  cleanups.push(async () => {
    if (proc.child.exitCode === null) {
      proc.child.kill("SIGKILL");
      await proc.exited;
    }
  });
  return { proc, url: await proc.ready };
}

const health = (runtimeId: string) => ({ kind: { case: "runtimeHealth" as const, value: { runtimeId } } });

async function postgresReachable(): Promise<string | undefined> {
  const client = new pg.Client({
    connectionString: process.env.MODELFORGE_TEST_POSTGRES_URL ?? DEFAULT_TEST_POSTGRES_URL,
    connectionTimeoutMillis: 3_000,
  });
  try {
    await client.connect();
    return undefined;
  } catch (err) {
    return (err as Error).message;
  } finally {
    await client.end().catch(() => undefined);
  }
}
const postgresProblem = await postgresReachable();

describe("control-plane processes", () => {
  it("loses nothing when the server is killed mid-job and restarted", async () => {
    const db = await createTestDatabase();
    cleanups.push(() => db.cleanup());
    const certs = mkdtempSync(join(tmpdir(), "mf-certs-"));
    cleanups.push(async () => rmSync(certs, { recursive: true, force: true }));
    const env = serverEnv(db, certs, await freePort(), {
      MODELFORGE_HEARTBEAT_INTERVAL: "200ms",
      MODELFORGE_STALE_AFTER: "3s",
      MODELFORGE_OFFLINE_AFTER: "6s",
      MODELFORGE_LEASE_DURATION: "10s",
    });
    let server = await start(env);
    const admin = adminClientAt(server.url, join(certs, "ca.crt"), key);
    const node = await enrollAt(server.url, admin, "survivor");

    let release!: () => void;
    const gate = new Promise<void>((resolve) => (release = resolve));
    const started: string[] = [];
    const handler: JobHandler = async (spec, ctx) => {
      const id = spec.kind.case === "runtimeHealth" ? spec.kind.value.runtimeId : "";
      started.push(`${id}@${ctx.attempt}`);
      if (id === "slow") await gate;
      return { result: { case: "runtimeHealth", value: { healthy: true, detail: id } } };
    };
    const agent: InProcessAgent = await startAgent(node, { registry: new CapabilityRegistry().register("runtime.health.v1", handler) });
    cleanups.push(() => agent.stop());
    await eventually(async () => (await admin.getNode({ nodeId: node.nodeId })).node!.capabilities.length === 1, 15_000, "advertised");

    const slow = (await admin.createJob({ nodeId: node.nodeId, spec: health("slow"), orderingKey: "dep-1" })).job!;
    const next = (await admin.createJob({ nodeId: node.nodeId, spec: health("next"), orderingKey: "dep-1" })).job!;
    await eventually(() => started.includes("slow@1"), 5_000, "slow job running");

    server.proc.child.kill("SIGKILL");
    await server.proc.exited;
    server = await start(env);

    // The agent reconnects, says it runs the slow job, and gets its lease back on the new session.
    await eventually(() => agent.tap.leases.filter((l) => l.lease.jobId === slow.id).length === 2, 20_000, "lease re-sent after restart");
    expect(agent.tap.leases.filter((l) => l.lease.jobId === slow.id).map((l) => l.lease.attempt)).toEqual([1, 1]);
    release();

    const after = adminClientAt(server.url, join(certs, "ca.crt"), key);
    await eventually(async () => (await after.getJob({ jobId: next.id })).job!.state === JobState.SUCCEEDED, 15_000, "both jobs done");
    const done = (await after.getJob({ jobId: slow.id })).job!;
    expect(done.state).toBe(JobState.SUCCEEDED);
    expect(done.attempt).toBe(1);
    expect(done.result?.result).toEqual({ case: "runtimeHealth", value: expect.objectContaining({ detail: "slow" }) });
    expect(started).toEqual(["slow@1", "next@1"]);
  }, 60_000);

  it.skipIf(postgresProblem !== undefined)(
    `two server processes on one PostgreSQL never lease a job twice${postgresProblem ? ` (skipped: PostgreSQL unreachable: ${postgresProblem})` : ""}`,
    async () => {
      // Its own PostgreSQL database, whatever MODELFORGE_TEST_DB says.
      const db = await createTestDatabase("postgres");
      cleanups.push(() => db.cleanup());
      const certs = mkdtempSync(join(tmpdir(), "mf-certs-"));
      cleanups.push(async () => rmSync(certs, { recursive: true, force: true }));
      const extra = { MODELFORGE_STALE_AFTER: "30s", MODELFORGE_OFFLINE_AFTER: "90s" };
      const a = await start(serverEnv(db, certs, await freePort(), extra));
      const b = await start(serverEnv(db, certs, await freePort(), extra)); // same CA: the first created it
      const adminA = adminClientAt(a.url, join(certs, "ca.crt"), key);
      const adminB = adminClientAt(b.url, join(certs, "ca.crt"), key);
      const node = await enrollAt(a.url, adminA, "contended");

      // The node advertises over a session once, then only polls.
      const agent = await startAgent(node, {
        registry: new CapabilityRegistry().register("runtime.health.v1", async () => ({
          result: { case: "runtimeHealth", value: { healthy: true } },
        })),
      });
      await eventually(async () => (await adminB.getNode({ nodeId: node.nodeId })).node!.capabilities.length === 1, 15_000, "advertised");
      await agent.stop();

      const state = await node.state();
      const clients = [nodeClient(state), nodeClient({ ...state, serverUrl: b.url })];
      await Promise.all(clients.map((c) => c.heartbeat({ agentVersion: "test" })));

      const plain = 40;
      const keys = ["k1", "k2", "k3"];
      const created = await Promise.all([
        ...Array.from({ length: plain }, (_, i) =>
          (i % 2 ? adminA : adminB).createJob({ nodeId: node.nodeId, spec: health(`plain-${i}`) }),
        ),
        ...keys.flatMap((k) =>
          Array.from({ length: 4 }, (_, i) =>
            (i % 2 ? adminB : adminA).createJob({ nodeId: node.nodeId, spec: health(`${k}-${i}`), orderingKey: k }),
          ),
        ),
      ]);
      expect(created.every((c) => c.job!.state === JobState.PENDING)).toBe(true); // no session anywhere

      const leases: { lease: JobLease; via: number }[] = [];
      for (let round = 0; round < 20; round++) {
        const got = await Promise.all(
          Array.from({ length: 60 }, (_, i) =>
            clients[i % 2]!.claimJob({}).then((r) => (r.lease ? { lease: r.lease, via: i % 2 } : undefined)),
          ),
        );
        const won = got.filter((g): g is { lease: JobLease; via: number } => g !== undefined);
        leases.push(...won);
        if (won.length === 0) break;
      }

      const ids = leases.map((l) => l.lease.jobId);
      expect(new Set(ids).size).toBe(ids.length); // never the same job twice
      expect(leases.every((l) => l.lease.attempt === 1)).toBe(true);
      expect(ids).toHaveLength(plain + keys.length); // every plain job, and each key's head only
      for (const k of keys) {
        // The key's first job in creation order, and only it.
        const first = (await adminA.listJobs({ orderingKey: k })).jobs.at(-1)!;
        expect(leases.filter((l) => l.lease.orderingKey === k).map((l) => l.lease.jobId)).toEqual([first.id]);
      }
      const attempts = await Promise.all(ids.map((jobId) => adminA.getJob({ jobId })));
      expect(attempts.every((r) => r.job!.state === JobState.LEASED && r.job!.attempt === 1)).toBe(true);
      // Both processes handed out leases.
      expect(new Set(leases.map((l) => l.via)).size).toBe(2);
    },
    90_000,
  );
});
