// Lease metrics under a manual clock: a lease that lapses on an online node counts as expired, work
// on a node unreachable past the reclaim grace as reclaimed, and the dispatch histogram measures a
// job that waited for its node from creation to the lease that finally went out.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ManualClock } from "../../common/clock.js";
import { JobState } from "../../gen/proto/modelforge/admin/v1/admin_pb.js";
import { CapabilityRegistry, type JobHandler } from "../../agent/jobs/index.js";
import { startTestServer, type TestServer } from "../support/server.js";
import { enrollTestNode, eventually, type TestNode } from "../support/node.js";
import { startAgent, type InProcessAgent } from "../support/agent.js";
import { scrape } from "../support/prometheus.js";

const clock = new ManualClock();
let ts: TestServer;
let node: TestNode;
const agents: InProcessAgent[] = [];

// Finishes at once, except the job named "hang", which runs until it is stopped.
const handler: JobHandler = async (spec, ctx) => {
  if (spec.kind.case === "runtimeHealth" && spec.kind.value.runtimeId === "hang") {
    await new Promise((_resolve, reject) => ctx.signal.addEventListener("abort", () => reject(ctx.signal.reason as Error)));
  }
  return { result: { case: "runtimeHealth", value: { healthy: true } } };
};
const registry = () => new CapabilityRegistry().register("runtime.health.v1", handler);
const job = async (runtimeId: string) =>
  (await ts.admin.createJob({ nodeId: node.nodeId, spec: { kind: { case: "runtimeHealth", value: { runtimeId } } } })).job!;
const metric = async (name: string) => (await scrape(ts.server.metricsUrl!)).value(name) ?? 0;

beforeAll(async () => {
  ts = await startTestServer(
    {
      MODELFORGE_METRICS_ADDRESS: "0",
      MODELFORGE_HEARTBEAT_INTERVAL: "200ms",
      MODELFORGE_TELEMETRY_INTERVAL: "10s",
      // Longer than the lease: a lapsed lease is on a node that is still online.
      MODELFORGE_STALE_AFTER: "10s",
      MODELFORGE_OFFLINE_AFTER: "20s",
      MODELFORGE_LEASE_DURATION: "2s",
      MODELFORGE_RECLAIM_GRACE: "1s",
    },
    { clock },
  );
  node = await enrollTestNode(ts, "leases");
});
afterAll(async () => {
  await Promise.all(agents.map((a) => a.stop()));
  await ts?.stop();
});

describe("lease metrics", () => {
  it("count grants, expiries and reclaims, and time dispatch from creation to the lease", async () => {
    expect(ts.server.metricsUrl).toMatch(/^http:\/\/127\.0\.0\.1:\d+\/metrics$/);
    const first = await startAgent(node, { registry: registry() });
    agents.push(first);
    await eventually(async () => (await ts.admin.getNode({ nodeId: node.nodeId })).node!.capabilities.length === 1, 10_000, "advertised");

    // The agent's job traffic is frozen: the lease is never renewed and lapses on an online node.
    first.tap.pause();
    await job("hang");
    expect(await metric("modelforge_leases_granted_total")).toBe(1);
    expect(await metric("modelforge_job_dispatch_seconds_count")).toBe(1);
    await clock.tick(2_100);
    await eventually(async () => (await metric("modelforge_leases_expired_total")) === 1, 10_000, "one lease expired");
    // Re-queued and leased again (attempt 2): a grant, but not a first dispatch.
    await eventually(async () => (await metric("modelforge_leases_granted_total")) === 2, 10_000, "the second attempt granted");
    expect(await metric("modelforge_job_dispatch_seconds_count")).toBe(1);

    // A partition past the offline threshold plus the grace: the leased job is reclaimed.
    await first.disconnect();
    await eventually(() => !ts.server.sessionsConnected(node.nodeId), 10_000, "session gone");
    await clock.tick(21_500);
    // The reclaim needs the liveness pass and the jobs pass of one round in either order: further
    // small ticks give it more rounds, as real time would.
    await eventually(
      async () => {
        if ((await metric("modelforge_leases_reclaimed_total")) === 1) return true;
        await clock.tick(100);
        return undefined;
      },
      30_000,
      "one job reclaimed",
    );

    // A job created while the node is away waits; its dispatch is timed when the node is back.
    const waiting = await job("quick");
    await clock.tick(1_500);
    agents.push(await startAgent(node, { registry: registry() }));
    await eventually(
      async () => (await ts.admin.getJob({ jobId: waiting.id })).job!.state === JobState.SUCCEEDED,
      10_000,
      "the waiting job done",
    );
    const s = await scrape(ts.server.metricsUrl!);
    expect(s.value("modelforge_job_dispatch_seconds_count")).toBe(2);
    expect(s.value("modelforge_job_dispatch_seconds_sum")).toBeGreaterThanOrEqual(1.5);
    expect(s.value("modelforge_job_dispatch_seconds_bucket", { le: "1" })).toBe(1);
    expect(s.value("modelforge_leases_granted_total")).toBe(3);
    expect(s.value("modelforge_session_opens_total")).toBe(2);
  });
});
