// Two control-plane replicas on one PostgreSQL database (always PostgreSQL: replicas need it), one
// CA between them. The agent holds its session on replica A; the operator talks to replica B.
// The periodic sweeps are slowed to a minute, so anything that reaches the agent within seconds
// came through the cluster bus (LISTEN/NOTIFY), not through a sweep.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { JobState } from "../../gen/proto/modelforge/admin/v1/admin_pb.js";
import { CapabilityRegistry, type JobHandler } from "../../agent/jobs/index.js";
import { startTestServer, type TestServer } from "../support/server.js";
import { createTestDatabase, type TestDatabase } from "../support/db.js";
import { enrollTestNode, eventually, type TestNode } from "../support/node.js";
import { startAgent, type InProcessAgent } from "../support/agent.js";

let db: TestDatabase;
let a: TestServer;
let b: TestServer;
let node: TestNode;
let agent: InProcessAgent;

const slowSweeps = { MODELFORGE_RECONCILE_INTERVAL: "60s" };
// Runs until cancelled.
const untilCancelled: JobHandler = (_spec, ctx) =>
  new Promise((_resolve, reject) => ctx.signal.addEventListener("abort", () => reject(new Error("cancelled")), { once: true }));

beforeAll(async () => {
  db = await createTestDatabase("postgres");
  a = await startTestServer({ DATABASE_URL: db.databaseUrl!, ...slowSweeps });
  b = await startTestServer({ DATABASE_URL: db.databaseUrl!, MODELFORGE_CERTS_DIR: a.config.certsDir, ...slowSweeps });
  node = await enrollTestNode(a, "cluster-node");
  agent = await startAgent(node, { registry: new CapabilityRegistry().register("runtime.health.v1", untilCancelled) });
  await eventually(() => a.server.sessionsConnected(node.nodeId), 15_000, "session on replica A");
  // Online as replica B sees it (from the heartbeat A flushed), with its capability recorded.
  await eventually(async () => (await b.admin.getNode({ nodeId: node.nodeId })).node?.capabilities.length === 1, 15_000, "node seen by B");
}, 120_000);

afterAll(async () => {
  await agent?.stop();
  await b?.stop();
  await a?.stop();
  await db?.cleanup();
});

describe("replicas on one PostgreSQL", () => {
  it("shows from replica B which replica holds the session", async () => {
    const seen = await eventually(async () => {
      const n = (await b.admin.getNode({ nodeId: node.nodeId })).node!;
      return n.sessionReplica !== "" ? n : undefined;
    }, 10_000);
    expect(seen.connected).toBe(true);
    const fromA = (await a.admin.getNode({ nodeId: node.nodeId })).node!;
    expect(fromA.sessionReplica).toBe(seen.sessionReplica);
    expect(b.server.sessionsConnected(node.nodeId)).toBe(false);
  });

  it("pushes a job created on B to the agent on A at once, and its cancellation too", async () => {
    const started = performance.now();
    const job = (await b.admin.createJob({ nodeId: node.nodeId, spec: { kind: { case: "runtimeHealth", value: { runtimeId: "rt" } } } }))
      .job!;
    expect(job.state).toBe(JobState.PENDING); // B holds no session for it
    const lease = await eventually(() => agent.tap.leases.find((l) => l.lease.jobId === job.id), 10_000, "lease on A's session");
    expect(lease.at - started).toBeLessThan(5_000);

    await b.admin.cancelJob({ jobId: job.id, reason: "changed my mind" });
    const cancel = await eventually(() => agent.tap.cancels.find((c) => c.jobId === job.id), 10_000, "cancel on A's session");
    expect(cancel.reason).toContain("changed my mind");
  });

  it("closes the session on A when B disables the node", async () => {
    await b.admin.disableNode({ nodeId: node.nodeId, reason: "maintenance" });
    await eventually(() => !a.server.sessionsConnected(node.nodeId), 5_000, "session on A closed");
  });
});
