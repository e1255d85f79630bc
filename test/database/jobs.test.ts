// Typed jobs end to end with a real server and real in-process agents (runAgent + JobRunner, with
// test-only capability handlers): leases pushed and completed, lost leases, bounded retries,
// ordering keys, cancellation, ownership, unknown kinds and receipts of destructive jobs. The
// server's time is a manual clock: a lease lapses when the test says so, never because the
// machine was busy.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { statSync, readFileSync } from "node:fs";
import { Code, ConnectError } from "@connectrpc/connect";
import { timestampMs } from "@bufbuild/protobuf/wkt";
import type { MessageInitShape } from "@bufbuild/protobuf";
import { JobState } from "../../gen/proto/modelforge/admin/v1/admin_pb.js";
import { Liveness } from "../../gen/proto/modelforge/common/v1/common_pb.js";
import { JobFailureCode, type JobSpecSchema } from "../../gen/proto/modelforge/jobs/v1/jobs_pb.js";
import { CapabilityRegistry, JobFailureError, LeaseLost, receiptsPathFor, type JobHandler } from "../../agent/jobs/index.js";
import { startTestServer, type TestServer } from "../support/server.js";
import { enrollTestNode, eventually, type TestNode } from "../support/node.js";
import { postJson } from "../support/http.js";
import { generousMs } from "../support/wait.js";
import { startAgent, type InProcessAgent } from "../support/agent.js";
import { ManualClock } from "../../common/clock.js";
import { onAbort } from "../../common/abort.js";

type SpecInit = MessageInitShape<typeof JobSpecSchema>;

let ts: TestServer;
const agents: InProcessAgent[] = [];
const clock = new ManualClock();

beforeAll(async () => {
  ts = await startTestServer(
    {
      MODELFORGE_HEARTBEAT_INTERVAL: "200ms",
      MODELFORGE_TELEMETRY_INTERVAL: "10s",
      MODELFORGE_STALE_AFTER: "1s",
      MODELFORGE_OFFLINE_AFTER: "2s",
      MODELFORGE_RECLAIM_GRACE: "500ms",
      MODELFORGE_LEASE_DURATION: "2s",
      MODELFORGE_APPROVED_ROOTS: "/srv/models",
    },
    { clock },
  );
});
afterAll(async () => {
  await Promise.all(agents.map((a) => a.stop()));
  await ts?.stop();
});

const health = (runtimeId = "rt-1"): SpecInit => ({ kind: { case: "runtimeHealth", value: { runtimeId } } });
const healthy: JobHandler = async () => ({ result: { case: "runtimeHealth", value: { healthy: true, detail: "ok" } } });
const getJob = async (jobId: string) => (await ts.admin.getJob({ jobId })).job!;
const attemptsOf = (jobId: string) =>
  ts.server.db.prisma.jobAttempt.findMany({ where: { jobId }, orderBy: { attempt: "asc" }, select: { attempt: true, outcome: true } });
const auditOf = async (targetId: string) => (await ts.admin.listAuditEvents({ targetId, pageSize: 100 })).events;

function deferred() {
  let open!: () => void;
  const promise = new Promise<void>((resolve) => (open = resolve));
  return { promise, open };
}

function registryWith(handlers: Record<string, JobHandler>): CapabilityRegistry {
  const r = new CapabilityRegistry();
  for (const [name, h] of Object.entries(handlers)) r.register(name, h);
  return r;
}

/** Enrolls a node, runs its agent with these handlers, waits until it is online and advertising. */
async function nodeWith(name: string, handlers: Record<string, JobHandler>, node?: TestNode) {
  const n = node ?? (await enrollTestNode(ts, name));
  const agent = await startAgent(n, { registry: registryWith(handlers) });
  agents.push(agent);
  const want = Object.keys(handlers).sort();
  await eventually(
    async () => {
      const got = (await ts.admin.getNode({ nodeId: n.nodeId })).node!;
      return got.connected && [...got.capabilities].sort().join() === want.join();
    },
    10_000,
    `${name} online advertising ${want.join(", ")}`,
  );
  return { node: n, agent };
}

/** Waits until the server has let go of the node's session (after the agent stopped). */
async function untilDisconnected(node: TestNode): Promise<void> {
  await eventually(
    async () => !(await ts.admin.getNode({ nodeId: node.nodeId })).node!.connected,
    generousMs,
    "session closed on the server",
  );
}

async function errorOf(p: Promise<unknown>): Promise<ConnectError> {
  const err = await p.then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(err).toBeInstanceOf(ConnectError);
  return err as ConnectError;
}

async function untilState(jobId: string, state: JobState, timeoutMs = 10_000) {
  return eventually(
    async () => {
      const job = await getJob(jobId);
      return job.state === state ? job : undefined;
    },
    timeoutMs,
    `job ${jobId} ${JobState[state]}`,
  );
}

/** Waits until the server has heard from the node at or after `at` (its clock's time). */
async function heardFromSince(node: TestNode, at: number): Promise<void> {
  await eventually(
    async () => {
      const last = (await ts.admin.getNode({ nodeId: node.nodeId })).node!.lastHeartbeatAt;
      return last !== undefined && timestampMs(last) >= at;
    },
    10_000,
    `a heartbeat from ${node.nodeId} at the new time`,
  );
}

describe("creating jobs", () => {
  it("refuses malformed specs naming the field, unknown and disabled nodes, and unadvertised capabilities", async () => {
    const { node, agent } = await nodeWith("validator", { "runtime.health.v1": healthy });
    const artifact = (change: Record<string, unknown> = {}): SpecInit => ({
      kind: {
        case: "artifactAcquire",
        value: {
          repository: "org/model",
          commit: "0123456789abcdef0123456789abcdef01234567",
          files: [{ path: "weights/model.safetensors", sizeBytes: 10n, sha256: "a".repeat(64) }],
          targetRoot: "/srv/models",
          ...change,
        },
      },
    });
    const create = (spec: SpecInit | undefined, extra: { maxAttempts?: number; nodeId?: string } = {}) =>
      ts.admin.createJob({ nodeId: extra.nodeId ?? node.nodeId, ...(spec ? { spec } : {}), maxAttempts: extra.maxAttempts ?? 0 });

    const cases: [SpecInit | undefined, RegExp][] = [
      [undefined, /spec/],
      [{ kind: { case: undefined } }, /spec\.kind/],
      [artifact({ commit: "0123456" }), /spec\.artifact_acquire\.commit.*full 40-digit/],
      [artifact({ commit: "main" }), /spec\.artifact_acquire\.commit/],
      [
        artifact({ files: [{ path: "../etc/passwd", sizeBytes: 1n, sha256: "a".repeat(64) }] }),
        /spec\.artifact_acquire\.files\[0\]\.path.*\.\./,
      ],
      [artifact({ files: [{ path: "a", sizeBytes: 1n, sha256: "xyz" }] }), /spec\.artifact_acquire\.files\[0\]\.sha256/],
      [artifact({ files: [{ path: "a", sizeBytes: 0n, sha256: "a".repeat(64) }] }), /spec\.artifact_acquire\.files\[0\]\.size_bytes/],
      [artifact({ targetRoot: "/tmp" }), /spec\.artifact_acquire\.target_root.*approved roots \(\/srv\/models\)/],
      [health(""), /spec\.runtime_health\.runtime_id/],
    ];
    for (const [spec, message] of cases) {
      const err = await errorOf(create(spec));
      expect(err.code, err.message).toBe(Code.InvalidArgument);
      expect(err.rawMessage).toMatch(message);
    }
    expect((await errorOf(create(health(), { maxAttempts: 101 }))).code).toBe(Code.InvalidArgument);

    const unadvertised = await errorOf(create(artifact()));
    expect(unadvertised.code).toBe(Code.FailedPrecondition);
    expect(unadvertised.rawMessage).toBe(
      `node ${node.nodeId} never advertised capability "artifact.acquire.v1"; it advertises: runtime.health.v1`,
    );

    expect((await errorOf(create(health(), { nodeId: "8d3c1c1e-0000-4000-8000-000000000000" }))).code).toBe(Code.NotFound);

    await agent.stop();
    await ts.admin.disableNode({ nodeId: node.nodeId, reason: "maintenance" });
    const disabled = await errorOf(create(health()));
    expect(disabled.code).toBe(Code.FailedPrecondition);
    expect(disabled.rawMessage).toMatch(/disabled \(maintenance\)/);
    await ts.admin.decommissionNode({ nodeId: node.nodeId, reason: "gone" });
    expect((await errorOf(create(health()))).rawMessage).toMatch(/decommissioned/);
    expect(await ts.server.db.prisma.job.count({ where: { nodeId: node.nodeId } })).toBe(0);
  });
});

describe("leasing and running", () => {
  it("pushes the lease down the session as soon as the job is created, and completes it", async () => {
    const handler: JobHandler = async (_spec, ctx) => {
      await ctx.progress({ percent: 50, message: "halfway" });
      return { result: { case: "runtimeHealth", value: { healthy: true, detail: "fine" } } };
    };
    const { node, agent } = await nodeWith("pusher", { "runtime.health.v1": handler });
    const started = performance.now();
    const created = (await ts.admin.createJob({ nodeId: node.nodeId, spec: health(), orderingKey: "" })).job!;
    // Online with a session here and nothing ahead of it: leased in the creating transaction.
    expect(created.state).toBe(JobState.LEASED);
    expect(created.attempt).toBe(1);
    expect(created.maxAttempts).toBe(5);
    const seen = await eventually(() => agent.tap.leases.find((l) => l.lease.jobId === created.id), 5_000, "lease pushed");
    // Pushed at once, not found by the 100 ms sweep.
    expect(seen.at - started).toBeLessThan(1_000);
    expect(seen.lease.attempt).toBe(1);
    expect(seen.lease.spec?.kind.case).toBe("runtimeHealth");
    expect(timestampMs(seen.lease.expiresAt!) - clock.now()).toBe(2_000);

    const done = await untilState(created.id, JobState.SUCCEEDED);
    expect(done.attempt).toBe(1);
    expect(done.result?.result).toEqual({ case: "runtimeHealth", value: expect.objectContaining({ healthy: true, detail: "fine" }) });
    expect(done.progress?.message).toBe("halfway");
    expect(done.finishedAt).toBeDefined();
    // Stored instants are the server's, in UTC whatever the database session's zone.
    expect(timestampMs(done.createdAt!)).toBe(clock.now());
    expect(timestampMs(done.createdAt!)).toBe(timestampMs(created.createdAt!));
    expect(await attemptsOf(created.id)).toEqual([{ attempt: 1, outcome: "succeeded" }]);
    expect((await auditOf(created.id)).map((e) => e.action)).toContain("job.created");
    const listed = await ts.admin.listJobs({ nodeId: node.nodeId, states: [JobState.SUCCEEDED] });
    expect(listed.jobs.map((j) => j.id)).toContain(created.id);
  });

  it("retries a lease lost mid-work with a higher attempt and refuses the stale attempt with 409", async () => {
    const seen: number[] = [];
    const aborted: unknown[] = [];
    const handler: JobHandler = async (_spec, ctx) => {
      seen.push(ctx.attempt);
      if (ctx.attempt === 1) {
        await new Promise((_resolve, reject) =>
          ctx.signal.addEventListener("abort", () => {
            aborted.push(ctx.signal.reason);
            reject(ctx.signal.reason as Error);
          }),
        );
      }
      return { result: { case: "runtimeHealth", value: { healthy: true } } };
    };
    const { node, agent } = await nodeWith("pauser", { "runtime.health.v1": handler });
    const job = (await ts.admin.createJob({ nodeId: node.nodeId, spec: health() })).job!;
    await eventually(() => seen.length === 1, 5_000, "attempt 1 running");

    agent.tap.pause(); // the agent freezes: no renewals get out, nothing gets in (heartbeats go on)
    await clock.tick(2_001); // attempt 1's two-second lease has lapsed (loops run once, the node looks stale)
    // Only a lease lapsed on an online node is re-queued: wait for the node's next heartbeat.
    await heardFromSince(node, clock.now());
    await clock.tick(100); // one sweep: attempt 1 expires and goes back to the queue
    // The leasing pass the expiry starts runs on its own: wait for its outcome (its push is held).
    await eventually(
      async () => {
        const j = await getJob(job.id);
        return j.attempt === 2 && j.state === JobState.LEASED;
      },
      10_000,
      "attempt 2 leased after attempt 1 expired",
    );

    const stale = await errorOf((await node.client()).reportJobProgress({ jobId: job.id, attempt: 1 }));
    expect(stale.code).toBe(Code.Aborted);
    expect(stale.rawMessage).toMatch(/^lease lost: stop work/);
    const state = await node.state();
    const http = await postJson(
      `${ts.url}/modelforge.agent.v1.AgentService/CompleteJob`,
      ts.caPem,
      { jobId: job.id, attempt: 1, result: { runtimeHealth: { healthy: true } } },
      {},
      { certPem: state.certPem, keyPem: state.keyPem },
    );
    expect(http.status).toBe(409);

    agent.tap.resume(); // the held renewal of attempt 1 is refused; the agent stops that work
    const done = await untilState(job.id, JobState.SUCCEEDED);
    expect(done.attempt).toBe(2);
    expect(seen).toEqual([1, 2]);
    expect(aborted[0]).toBeInstanceOf(LeaseLost);
    expect(await attemptsOf(job.id)).toEqual([
      { attempt: 1, outcome: "expired" },
      { attempt: 2, outcome: "succeeded" },
    ]);
    expect(agent.logs()).toMatch(/lease lost: stop work/);
  });

  it("retries a retryable failure until attempts run out; a non-retryable one ends the job", async () => {
    const calls: number[] = [];
    const flaky: JobHandler = async (spec, ctx) => {
      calls.push(ctx.attempt);
      const id = spec.kind.case === "runtimeHealth" ? spec.kind.value.runtimeId : "";
      throw new JobFailureError(JobFailureCode.RUNTIME_ERROR, `runtime ${id} crashed`, id === "retry-me");
    };
    const { node } = await nodeWith("flaky", { "runtime.health.v1": flaky });
    const job = (await ts.admin.createJob({ nodeId: node.nodeId, spec: health("retry-me"), maxAttempts: 3 })).job!;
    const failed = await untilState(job.id, JobState.FAILED);
    expect(failed.attempt).toBe(3);
    expect(calls).toEqual([1, 2, 3]);
    expect(failed.failure).toMatchObject({ code: JobFailureCode.RUNTIME_ERROR, message: "runtime retry-me crashed", retryable: true });
    expect((await attemptsOf(job.id)).map((a) => a.outcome)).toEqual(["failed", "failed", "failed"]);

    calls.length = 0;
    const once = (await ts.admin.createJob({ nodeId: node.nodeId, spec: health("fatal"), maxAttempts: 3 })).job!;
    const ended = await untilState(once.id, JobState.FAILED);
    expect(ended.attempt).toBe(1);
    expect(calls).toEqual([1]);
    expect(ended.failure?.retryable).toBe(false);
  });

  it("leases only to online nodes; ClaimJob serves an agent without a session; lapsed leases retry until attempts are exhausted", async () => {
    // The node advertises once over a session, then goes quiet and later polls with unary calls.
    const { node, agent } = await nodeWith("poller", { "runtime.health.v1": healthy });
    await agent.stop();
    await untilDisconnected(node);
    const client = await node.client();
    await clock.tick(1_001); // silent for longer than the stale threshold
    expect((await ts.admin.getNode({ nodeId: node.nodeId })).node!.liveness).toBe(Liveness.STALE);
    const job = (await ts.admin.createJob({ nodeId: node.nodeId, spec: health(), maxAttempts: 2 })).job!;
    expect((await client.claimJob({})).lease).toBeUndefined(); // not online: nothing is leased

    {
      await client.heartbeat({ agentVersion: "test" }); // heard from: online again
      const first = (await client.claimJob({})).lease!;
      expect(first.jobId).toBe(job.id);
      expect(first.attempt).toBe(1);
      // Progress renews the lease, and is bounded.
      await clock.tick(10);
      const renewed = await client.reportJobProgress({
        jobId: job.id,
        attempt: 1,
        progress: { percent: 10, bytesDone: 5n, bytesTotal: 50n },
      });
      expect(timestampMs(renewed.expiresAt!)).toBeGreaterThan(timestampMs(first.expiresAt!));
      expect(renewed.cancelRequested).toBe(false);
      expect((await client.claimJob({})).lease).toBeUndefined(); // nothing else to lease
      const oversized = await errorOf(client.reportJobProgress({ jobId: job.id, attempt: 1, progress: { message: "x".repeat(300) } }));
      expect(oversized.code).toBe(Code.InvalidArgument);
      expect(oversized.rawMessage).toMatch(/progress\.message/);
      expect((await errorOf(client.reportJobProgress({ jobId: job.id, attempt: 1, progress: { percent: 150 } }))).rawMessage).toMatch(
        /progress\.percent/,
      );
      expect((await errorOf(client.reportJobProgress({ jobId: job.id, attempt: 2 }))).code).toBe(Code.FailedPrecondition);
      expect((await getJob(job.id)).progress).toMatchObject({ percent: 10, bytesDone: 5n, bytesTotal: 50n });
      // A result of another capability is refused.
      const wrong = await errorOf(
        client.completeJob({ jobId: job.id, attempt: 1, result: { result: { case: "deploymentHealth", value: { healthy: true } } } }),
      );
      expect(wrong.code).toBe(Code.InvalidArgument);
      expect(wrong.rawMessage).toMatch(/deployment\.health\.v1 result, but the job is runtime\.health\.v1/);

      // No more renewals: the lease lapses and the job goes back to the queue for attempt 2.
      await clock.tick(2_001);
      await client.heartbeat({ agentVersion: "test" });
      await clock.tick(100);
      expect((await getJob(job.id)).state).toBe(JobState.PENDING);
      const second = (await client.claimJob({})).lease!;
      expect(second.attempt).toBe(2);
      await clock.tick(2_001);
      await client.heartbeat({ agentVersion: "test" });
      await clock.tick(100);
      const failed = await getJob(job.id);
      expect(failed.state).toBe(JobState.FAILED);
      expect(failed.failure?.code).toBe(JobFailureCode.ATTEMPTS_EXHAUSTED);
      expect(failed.failure?.message).toBe("lease expired on attempt 2 of 2: attempts exhausted");
      expect(await attemptsOf(job.id)).toEqual([
        { attempt: 1, outcome: "expired" },
        { attempt: 2, outcome: "expired" },
      ]);
      expect((await auditOf(job.id)).some((e) => e.action === "job.failed" && e.details.code === "ATTEMPTS_EXHAUSTED")).toBe(true);
    }
  });

  it("serves a polling agent that never opens a session: capabilities from its heartbeat, leases from ClaimJob", async () => {
    const node = await enrollTestNode(ts, "pure-poller");
    const client = await node.client();
    await client.heartbeat({ agentVersion: "poller/1", capabilities: ["runtime.health.v1"] });
    expect((await ts.admin.getNode({ nodeId: node.nodeId })).node!.capabilities).toEqual(["runtime.health.v1"]);
    const job = (await ts.admin.createJob({ nodeId: node.nodeId, spec: health("rt-poll") })).job!;
    const lease = await eventually(async () => (await client.claimJob({})).lease, 5_000, "a lease by polling");
    expect(lease.jobId).toBe(job.id);
    await client.completeJob({
      jobId: job.id,
      attempt: lease.attempt,
      result: { result: { case: "runtimeHealth", value: { healthy: true } } },
    });
    expect((await untilState(job.id, JobState.SUCCEEDED)).result?.result.case).toBe("runtimeHealth");
  });

  it("leases jobs sharing an ordering key strictly in creation order, one at a time, under concurrent creation", async () => {
    const started: string[] = [];
    const running = new Map<string, number>();
    let overlap = 0;
    const handler: JobHandler = async (spec, ctx) => {
      const id = spec.kind.case === "runtimeHealth" ? spec.kind.value.runtimeId : "";
      const key = id.split("#")[0]!;
      started.push(id);
      running.set(key, (running.get(key) ?? 0) + 1);
      if (running.get(key)! > 1) overlap++;
      // Held across a round trip to the server: a lease it pushed meanwhile for the same key would overlap.
      await ctx.progress({ percent: 50 });
      running.set(key, running.get(key)! - 1);
      return { result: { case: "runtimeHealth", value: { healthy: true } } };
    };
    const { node } = await nodeWith("orderly", { "runtime.health.v1": handler });
    const keys = ["deploy-a", "deploy-b"];
    const made = await Promise.all(
      Array.from({ length: 16 }, (_, i) => {
        const key = keys[i % 2]!;
        return ts.admin.createJob({ nodeId: node.nodeId, spec: health(`${key}#${i}`), orderingKey: key });
      }),
    );
    // One call per look, and a deadline for a loaded machine: sixteen jobs in two strict queues
    // took longer than 20 s in a CI run beside two busy cores (the suite at full parallelism).
    await eventually(
      async () => {
        const { jobs } = await ts.admin.listJobs({ nodeId: node.nodeId, states: [JobState.SUCCEEDED], pageSize: 100 });
        return jobs.length === made.length;
      },
      50_000,
      "all keyed jobs succeeded",
    );
    expect(overlap).toBe(0);
    for (const key of keys) {
      // Creation order is the server's order (newest first in ListJobs).
      const listed = (await ts.admin.listJobs({ orderingKey: key, pageSize: 100 })).jobs.reverse();
      const created = listed.map((j) => (j.spec!.kind.case === "runtimeHealth" ? j.spec!.kind.value.runtimeId : ""));
      expect(created).toHaveLength(8);
      // In order of first start (a job whose lease lapsed under load may legitimately run again).
      expect([...new Set(started.filter((s) => s.startsWith(`${key}#`)))]).toEqual(created);
    }
  });

  it("honours cancellation, pushed or learnt from a progress reply, and cancels a pending job at once", async () => {
    const stoppedBy: unknown[] = [];
    // The handler reports progress again each time the test nudges it, until its work is stopped.
    let nudged = deferred();
    const nudge = () => {
      const now = nudged;
      nudged = deferred();
      now.open();
    };
    const slow: JobHandler = async (_spec, ctx) => {
      for (let i = 0; ; i++) {
        if (ctx.signal.aborted) {
          stoppedBy.push(ctx.signal.reason);
          throw ctx.signal.reason as Error;
        }
        await ctx.progress({ percent: Math.min(99, i) });
        await Promise.race([nudged.promise, new Promise<void>((resolve) => onAbort(ctx.signal, resolve))]);
      }
    };
    const { node, agent } = await nodeWith("canceller", { "runtime.health.v1": slow });
    for (const viaReply of [false, true]) {
      agent.tap.dropCancels = viaReply;
      const job = (await ts.admin.createJob({ nodeId: node.nodeId, spec: health() })).job!;
      await untilState(job.id, JobState.LEASED);
      await eventually(async () => (await getJob(job.id)).progress !== undefined, 5_000, "progress");
      const requested = (await ts.admin.cancelJob({ jobId: job.id, reason: "no longer needed" })).job!;
      expect(requested.cancelRequested).toBe(true);
      // With the push lost, the agent learns of the cancel from the reply to its next progress.
      const cancelled = await eventually(
        async () => {
          nudge();
          const got = await getJob(job.id);
          return got.state === JobState.CANCELLED ? got : undefined;
        },
        10_000,
        `job ${job.id} CANCELLED`,
      );
      expect(cancelled.failure?.code).toBe(JobFailureCode.CANCELLED);
      expect(cancelled.failure?.retryable).toBe(false);
      expect((await auditOf(job.id)).map((e) => e.action)).toEqual(expect.arrayContaining(["job.cancel_requested", "job.cancelled"]));
      // The server pushes the cancel either way; with the push lost, the progress reply carried it.
      expect(agent.tap.cancels.some((c) => c.jobId === job.id)).toBe(true);
      // Cancelling again is harmless; a finished job cannot be cancelled.
      expect((await ts.admin.cancelJob({ jobId: job.id })).job!.state).toBe(JobState.CANCELLED);
    }
    expect(stoppedBy).toHaveLength(2);
    agent.tap.dropCancels = false;

    await agent.disconnect();
    await untilDisconnected(node);
    const pending = (await ts.admin.createJob({ nodeId: node.nodeId, spec: health() })).job!;
    expect(pending.state).toBe(JobState.PENDING);
    const cancelled = (await ts.admin.cancelJob({ jobId: pending.id, reason: "changed my mind" })).job!;
    expect(cancelled.state).toBe(JobState.CANCELLED);
    expect(cancelled.attempt).toBe(0);

    const done = (await ts.admin.listJobs({ nodeId: node.nodeId, states: [JobState.CANCELLED] })).jobs;
    expect(done).toHaveLength(3);
  });

  it("never lets a node see, claim or update another node's job (403), whatever id it sends", async () => {
    const gate = deferred();
    const waiting: JobHandler = async () => {
      await gate.promise;
      return { result: { case: "runtimeHealth", value: { healthy: true } } };
    };
    const owner = await nodeWith("owner", { "runtime.health.v1": waiting });
    const other = await nodeWith("other", { "runtime.health.v1": healthy });
    const job = (await ts.admin.createJob({ nodeId: owner.node.nodeId, spec: health() })).job!;
    await untilState(job.id, JobState.LEASED);

    const client = await other.node.client();
    for (const call of [
      () => client.reportJobProgress({ jobId: job.id, attempt: 1 }),
      () => client.completeJob({ jobId: job.id, attempt: 1, result: { result: { case: "runtimeHealth", value: { healthy: false } } } }),
      () => client.failJob({ jobId: job.id, attempt: 1, failure: { code: JobFailureCode.INTERNAL, message: "mine now" } }),
    ]) {
      const err = await errorOf(call());
      expect(err.code).toBe(Code.PermissionDenied);
    }
    const state = await other.node.state();
    const http = await postJson(
      `${ts.url}/modelforge.agent.v1.AgentService/ReportJobProgress`,
      ts.caPem,
      { jobId: job.id, attempt: 1 },
      {},
      { certPem: state.certPem, keyPem: state.keyPem },
    );
    expect(http.status).toBe(403);
    expect((await client.claimJob({})).lease).toBeUndefined();
    expect((await errorOf(client.reportJobProgress({ jobId: "8d3c1c1e-0000-4000-8000-000000000000", attempt: 1 }))).code).toBe(
      Code.NotFound,
    );
    expect((await errorOf(client.reportJobProgress({ jobId: "not-a-job", attempt: 1 }))).code).toBe(Code.InvalidArgument);
    expect(other.agent.tap.leases).toHaveLength(0);

    gate.open();
    const done = await untilState(job.id, JobState.SUCCEEDED);
    expect(done.result?.result.case).toBe("runtimeHealth");
    expect(done.nodeId).toBe(owner.node.nodeId);
  });

  it("fails a job kind the agent does not implement at once, clearly and without retry", async () => {
    const first = await nodeWith("downgraded", { "runtime.health.v1": healthy });
    await first.agent.stop();
    await untilDisconnected(first.node);
    // Created while the node still advertises runtime.health.v1 from its last session...
    const job = (await ts.admin.createJob({ nodeId: first.node.nodeId, spec: health(), maxAttempts: 5 })).job!;
    // ...then the agent comes back without that handler.
    await nodeWith("downgraded", { "deployment.health.v1": healthy }, first.node);
    const failed = await untilState(job.id, JobState.FAILED);
    expect(failed.attempt).toBe(1);
    expect(failed.failure).toMatchObject({
      code: JobFailureCode.UNSUPPORTED_CAPABILITY,
      retryable: false,
      message: 'this agent does not implement capability "runtime.health.v1"; it implements: deployment.health.v1',
    });
  });

  it("does not run a replayed destructive job twice, even after the agent restarts", async () => {
    let runs = 0;
    const drain: JobHandler = async () => {
      runs++;
      return { result: { case: "deploymentDrain", value: { completedInFlight: 7 } } };
    };
    const first = await nodeWith("drainer", { "deployment.drain.v1": drain });
    // The network loses the completion: the server never hears the outcome.
    first.agent.tap.drop = (m) => m.case === "jobComplete";
    const spec: SpecInit = { kind: { case: "deploymentDrain", value: { deploymentId: "dep-1" } } };
    const job = (await ts.admin.createJob({ nodeId: first.node.nodeId, spec })).job!;
    const receipts = receiptsPathFor(first.node.statePath);
    await eventually(() => runs === 1 && readFileSync(receipts, "utf8").includes(job.id), 5_000, "receipt written");
    expect(statSync(receipts).mode & 0o777).toBe(0o600);
    await first.agent.stop();
    await untilDisconnected(first.node);
    expect((await getJob(job.id)).state).toBe(JobState.LEASED);

    // A new agent process (same state directory, so same receipts) gets the lease again. Time moves
    // on a little first: its session must open after the lease it no longer holds was granted.
    await clock.tick(1);
    const second = await nodeWith("drainer", { "deployment.drain.v1": drain }, first.node);
    const done = await untilState(job.id, JobState.SUCCEEDED);
    expect(runs).toBe(1);
    expect(done.attempt).toBe(2);
    expect(done.result?.result).toEqual({ case: "deploymentDrain", value: expect.objectContaining({ completedInFlight: 7 }) });
    expect(second.agent.logs()).toMatch(/replayed lease: re-sending the recorded outcome/);
    expect(await attemptsOf(job.id)).toEqual([
      { attempt: 1, outcome: "expired" },
      { attempt: 2, outcome: "succeeded" },
    ]);
  });
});
