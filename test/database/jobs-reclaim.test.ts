// Reclaim of work on a partitioned node: after the offline threshold plus the reclaim grace, its
// in-flight job is marked failed ("node unreachable: reclaimed") and audited, its deployment
// replica is moved off it (placed again, here nowhere else, so PENDING), nothing is leased while it is away, and when it comes back it is told to stop the
// reclaimed job and gets its pending work. Time is a manual clock: the partition lasts exactly as
// long as the test says, however busy the machine.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { randomUUID } from "node:crypto";
import { JobState } from "../../gen/proto/modelforge/admin/v1/admin_pb.js";
import { Liveness } from "../../gen/proto/modelforge/common/v1/common_pb.js";
import { JobFailureCode } from "../../gen/proto/modelforge/jobs/v1/jobs_pb.js";
import { CapabilityRegistry, LeaseLost, type JobHandler } from "../../agent/jobs/index.js";
import { startTestServer, type TestServer } from "../support/server.js";
import { enrollTestNode, eventually } from "../support/node.js";
import { startAgent, type InProcessAgent } from "../support/agent.js";
import { ManualClock } from "../../common/clock.js";

let ts: TestServer;
const clock = new ManualClock();
const agents: InProcessAgent[] = [];

beforeAll(async () => {
  ts = await startTestServer(
    {
      MODELFORGE_HEARTBEAT_INTERVAL: "200ms",
      MODELFORGE_TELEMETRY_INTERVAL: "10s",
      MODELFORGE_STALE_AFTER: "1s",
      MODELFORGE_OFFLINE_AFTER: "2s",
      MODELFORGE_RECLAIM_GRACE: "500ms",
      // Longer than the stale threshold: the lease lapses while the node is already unreachable,
      // which must not put the job back in the queue.
      MODELFORGE_LEASE_DURATION: "3s",
    },
    { clock },
  );
});
afterAll(async () => {
  await Promise.all(agents.map((a) => a.stop()));
  await ts?.stop();
});

const getJob = async (jobId: string) => (await ts.admin.getJob({ jobId })).job!;

describe("a partitioned node", () => {
  it("has its running work reclaimed, not rescheduled, and reconciles when it comes back", async () => {
    const started: string[] = [];
    const stoppedBy: unknown[] = [];
    const handler: JobHandler = async (spec, ctx) => {
      const id = spec.kind.case === "runtimeHealth" ? spec.kind.value.runtimeId : "";
      started.push(`${id}@${ctx.attempt}`);
      if (id === "long") {
        // Runs until told to stop, as a job on a partitioned node would.
        await new Promise((_resolve, reject) =>
          ctx.signal.addEventListener("abort", () => {
            stoppedBy.push(ctx.signal.reason);
            reject(ctx.signal.reason as Error);
          }),
        );
      }
      return { result: { case: "runtimeHealth", value: { healthy: true } } };
    };
    const node = await enrollTestNode(ts, "partitioned");
    const agent = await startAgent(node, { registry: new CapabilityRegistry().register("runtime.health.v1", handler) });
    agents.push(agent);
    await eventually(async () => (await ts.admin.getNode({ nodeId: node.nodeId })).node!.capabilities.length === 1, 10_000, "advertised");

    const deploymentId = randomUUID();
    // A deployment served by the node (as the controller leaves one that loaded).
    const served = { runtimeProfile: "p", repository: "acme/llm", commit: "a".repeat(40) };
    await ts.server.db.prisma.deployment.create({
      data: {
        id: deploymentId,
        name: "llm",
        nodeId: node.nodeId,
        state: "ready",
        ...served,
        instances: { create: { revision: 1n, nodeId: node.nodeId, phase: "ready", ...served } },
      },
    });
    const long = (
      await ts.admin.createJob({ nodeId: node.nodeId, spec: { kind: { case: "runtimeHealth", value: { runtimeId: "long" } } } })
    ).job!;
    await eventually(() => started.includes("long@1"), 5_000, "long job running");

    // The partition: the session and heartbeats stop, the job keeps running on the node.
    await agent.disconnect();
    // A job created before the server notices the dead session is leased to it (and reclaimed
    // later, correctly); this one is meant to wait for the node, so create it once it is gone.
    await eventually(async () => !(await ts.admin.getNode({ nodeId: node.nodeId })).node!.connected, 5_000, "session gone on the server");
    const queued = (
      await ts.admin.createJob({ nodeId: node.nodeId, spec: { kind: { case: "runtimeHealth", value: { runtimeId: "queued" } } } })
    ).job!;

    // Offline (past 2 s) but still within the reclaim grace: the job stays leased to the node.
    await clock.tick(2_400);
    expect((await ts.admin.getNode({ nodeId: node.nodeId })).node!.liveness).toBe(Liveness.OFFLINE);
    expect((await getJob(long.id)).state).toBe(JobState.LEASED);
    // Past offline 2 s + grace 0.5 s: reclaimed by the next round of the sweep.
    await clock.tick(200);
    const reclaimed = await getJob(long.id);
    expect(reclaimed.state).toBe(JobState.FAILED);
    expect(reclaimed.failure).toMatchObject({
      code: JobFailureCode.NODE_UNREACHABLE,
      message: "node unreachable: reclaimed",
      retryable: false,
    });
    expect(reclaimed.attempt).toBe(1);
    expect((await ts.admin.getNode({ nodeId: node.nodeId })).node!.liveness).toBe(Liveness.OFFLINE);
    // The replica is the controller's: taken off the unreachable node and waiting to be placed (the
    // deployment is pinned to this node, so nowhere else fits).
    await eventually(
      async () => (await ts.server.db.prisma.deploymentInstance.findFirstOrThrow({ where: { deploymentId } })).phase === "pending",
      10_000,
      "the replica moved off the unreachable node",
    );
    const instance = await ts.server.db.prisma.deploymentInstance.findFirstOrThrow({ where: { deploymentId } });
    expect(instance.nodeId).toBeNull();
    const events = (await ts.admin.listAuditEvents({ pageSize: 200 })).events;
    expect(events.find((e) => e.action === "job.failed" && e.targetId === long.id)?.details).toMatchObject({
      reason: "node unreachable: reclaimed",
      code: "NODE_UNREACHABLE",
      nodeId: node.nodeId,
    });
    expect(events.some((e) => e.action === "deployment.replica_unplaced" && e.targetId === deploymentId)).toBe(true);
    const attempts = await ts.server.db.prisma.jobAttempt.findMany({ where: { jobId: long.id } });
    expect(attempts.map((a) => [a.attempt, a.outcome])).toEqual([[1, "reclaimed"]]);

    // Nothing was started again, and the node's pending work waits for it.
    expect((await getJob(queued.id)).state).toBe(JobState.PENDING);
    expect((await getJob(queued.id)).attempt).toBe(0);
    expect(agent.runner.runningJobIds()).toEqual([long.id]); // still running on the node
    expect(started).toEqual(["long@1"]);

    // The node comes back, says it runs the reclaimed job, and is told to stop it.
    const back = await startAgent(node, { runner: agent.runner });
    agents.push(back);
    await eventually(async () => (await getJob(queued.id)).state === JobState.SUCCEEDED, 10_000, "queued job done after return");
    await eventually(() => stoppedBy.length === 1, 5_000, "reclaimed job stopped on the node");
    expect(stoppedBy[0]).toBeInstanceOf(LeaseLost);
    expect(back.tap.cancels.map((c) => c.jobId)).toEqual([long.id]);
    expect(back.tap.cancels[0]!.reason).toMatch(/^lease lost: stop work \(job is failed\)/);
    const after = await getJob(long.id);
    expect(after.state).toBe(JobState.FAILED);
    expect(after.attempt).toBe(1);
    expect(started).toEqual(["long@1", "queued@1"]);
    await eventually(() => back.runner.runningJobIds().length === 0, 5_000, "runner idle");
  });
});
