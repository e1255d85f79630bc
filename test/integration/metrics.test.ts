// The Prometheus endpoints, scraped over real HTTP while a real agent process enrolls, connects,
// heartbeats, reports telemetry, runs an artifact.acquire.v1 job from a loopback mirror and is
// refused after its node is disabled: every metric that counts one of those things must move.
// Also CPU telemetry end to end: sampled by the agent, stored, returned by GetNode, shown by
// `forge nodes get`.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createHash, randomBytes } from "node:crypto";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Code, ConnectError } from "@connectrpc/connect";
import { JobState } from "../../gen/proto/modelforge/admin/v1/admin_pb.js";
import { generateNodeKeyAndCsr } from "../../agent/pki/keys.js";
import { renderNodeDetail } from "../../cli/commands/nodes-render.js";
import { startTestServer, type TestServer } from "../support/server.js";
import { enrollTestNode, eventually, type TestNode } from "../support/node.js";
import { spawnAgent, type AgentProcess } from "../support/process.js";
import { startMirror, type Mirror } from "../support/mirror.js";
import { freePort } from "../support/ports.js";
import { scrape } from "../support/prometheus.js";

const nodeName = "gpu-metrics-7f3a";
let ts: TestServer;
let mirror: Mirror;
let root: string;
let node: TestNode;
let agent: AgentProcess;
let serverMetrics: string;
let agentMetrics: string;

beforeAll(async () => {
  root = mkdtempSync(join(tmpdir(), "mf-metrics-root-"));
  mirror = await startMirror();
  ts = await startTestServer({
    MODELFORGE_METRICS_ADDRESS: "127.0.0.1:0",
    MODELFORGE_HEARTBEAT_INTERVAL: "200ms",
    MODELFORGE_TELEMETRY_INTERVAL: "300ms",
    MODELFORGE_STALE_AFTER: "2s",
    MODELFORGE_OFFLINE_AFTER: "4s",
    MODELFORGE_APPROVED_ROOTS: root,
  });
  serverMetrics = ts.server.metricsUrl!;
  agentMetrics = `http://127.0.0.1:${await freePort()}/metrics`;
}, 60_000);

afterAll(async () => {
  await agent?.stop();
  await ts?.stop();
  await mirror?.close();
  if (root) rmSync(root, { recursive: true, force: true });
});

describe("the control plane's metrics endpoint", () => {
  it("listens on loopback, plain HTTP, /metrics only, with Node's process metrics and event-loop delay", async () => {
    expect(serverMetrics).toMatch(/^http:\/\/127\.0\.0\.1:\d+\/metrics$/);
    const s = await scrape(serverMetrics);
    for (const name of ["process_cpu_user_seconds_total", "process_resident_memory_bytes", "nodejs_eventloop_lag_p99_seconds"]) {
      expect(s.value(name), name).toBeGreaterThanOrEqual(0);
    }
    expect(s.value("modelforge_sessions_connected")).toBe(0);
    expect(s.value("modelforge_admission_queue_depth")).toBe(0);
    expect(s.value("modelforge_enrollments_total", { outcome: "ok" })).toBe(0);
    expect((await fetch(serverMetrics.replace("/metrics", "/"))).status).toBe(404);
    expect((await fetch(serverMetrics, { method: "POST" })).status).toBe(405);
  });

  it("counts enrollments by outcome", async () => {
    const before = await scrape(serverMetrics);
    node = await enrollTestNode(ts, nodeName);
    const refused = await ts.anonymousAgent
      .enroll({ token: `mfet_${"x".repeat(40)}`, csrPem: (await generateNodeKeyAndCsr()).csrPem })
      .then(
        () => undefined,
        (e: unknown) => ConnectError.from(e).code,
      );
    expect(refused).toBe(Code.Unauthenticated);
    const after = await scrape(serverMetrics);
    expect(after.value("modelforge_enrollments_total", { outcome: "ok" })).toBe(1);
    expect(after.sum("modelforge_enrollments_total", { outcome: "unauthenticated" })).toBe(
      before.sum("modelforge_enrollments_total", { outcome: "unauthenticated" }) + 1,
    );
  });

  it("moves with a real agent: session, heartbeats received and flushed, node online", async () => {
    agent = spawnAgent(node.statePath, {
      MODELFORGE_AGENT_ARTIFACT_SOURCES: mirror.url,
      MODELFORGE_AGENT_ARTIFACT_ROOTS: root,
      MODELFORGE_AGENT_METRICS_ADDRESS: agentMetrics.replace(/^http:\/\/|\/metrics$/g, ""),
    });
    await eventually(() => ts.server.sessionsConnected(node.nodeId), 30_000, "the agent's session");
    const first = await eventually(
      async () => {
        const s = await scrape(serverMetrics);
        const counted =
          (s.value("modelforge_heartbeats_received_total") ?? 0) > 0 && (s.value("modelforge_heartbeats_flushed_total") ?? 0) > 0;
        return s.value("modelforge_nodes", { state: "online" }) === 1 && counted ? s : undefined;
      },
      30_000,
      "the node online and heartbeats counted",
    );
    expect(first.value("modelforge_sessions_connected")).toBe(1);
    expect(first.value("modelforge_session_opens_total")).toBe(1);
    expect(first.value("modelforge_heartbeat_flush_duration_seconds_count")).toBeGreaterThan(0);
    for (const state of ["pending", "stale", "offline", "disabled", "decommissioned"]) {
      expect(first.value("modelforge_nodes", { state }), state).toBe(0);
    }
    const received = first.value("modelforge_heartbeats_received_total")!;
    expect(received).toBeGreaterThan(0);
    // Heartbeats keep arriving every 200 ms.
    await eventually(
      async () => ((await scrape(serverMetrics)).value("modelforge_heartbeats_received_total") ?? 0) >= received + 3,
      30_000,
      "more heartbeats counted",
    );
  });

  it("counts a job: lease granted, dispatch latency, jobs by state and capability; the agent counts the run and its bytes", async () => {
    const commit = createHash("sha1").update("metrics").digest("hex");
    const content = randomBytes(123_457);
    mirror.put("acme/metrics-model", commit, "model.gguf", { content });
    const { job } = await ts.admin.createJob({
      nodeId: node.nodeId,
      spec: {
        kind: {
          case: "artifactAcquire",
          value: {
            repository: "acme/metrics-model",
            commit,
            targetRoot: root,
            files: [{ path: "model.gguf", sizeBytes: BigInt(content.length), sha256: createHash("sha256").update(content).digest("hex") }],
          },
        },
      },
    });
    const done = await eventually(
      async () => {
        const j = (await ts.admin.getJob({ jobId: job!.id })).job!;
        return j.state === JobState.SUCCEEDED || j.state === JobState.FAILED ? j : undefined;
      },
      30_000,
      "the job to finish",
    );
    expect(done.state, JSON.stringify(done.failure)).toBe(JobState.SUCCEEDED);
    const s = await eventually(
      async () => {
        const s = await scrape(serverMetrics);
        return s.value("modelforge_jobs", { state: "succeeded", capability: "artifact.acquire.v1" }) === 1 ? s : undefined;
      },
      10_000,
      "the succeeded job in the jobs gauge",
    );
    expect(s.value("modelforge_leases_granted_total")).toBe(1);
    expect(s.value("modelforge_job_dispatch_seconds_count")).toBe(1);
    expect(s.value("modelforge_job_dispatch_seconds_bucket", { le: "+Inf" })).toBe(1);
    expect(s.value("modelforge_leases_expired_total")).toBe(0);
    expect(s.value("modelforge_leases_reclaimed_total")).toBe(0);

    const a = await scrape(agentMetrics);
    expect(a.value("modelforge_agent_jobs_total", { capability: "artifact.acquire.v1", outcome: "succeeded" })).toBe(1);
    expect(a.value("modelforge_agent_artifact_bytes_total")).toBe(content.length);
    expect(a.value("process_cpu_user_seconds_total")).toBeGreaterThan(0);
  });

  it("counts failed statements by kind", async () => {
    const before = (await scrape(serverMetrics)).sum("modelforge_db_query_errors_total", { kind: "other" });
    await expect(ts.server.db.prisma.$executeRawUnsafe("SELECT 1/0")).rejects.toThrow();
    expect((await scrape(serverMetrics)).sum("modelforge_db_query_errors_total", { kind: "other" })).toBe(before + 1);
  });

  it("counts the refusal of a disabled node's session by reason, and the agent counts its reconnects", async () => {
    await ts.admin.disableNode({ nodeId: node.nodeId, reason: "metrics test" });
    const s = await eventually(
      async () => {
        const s = await scrape(serverMetrics);
        return (s.value("modelforge_session_refusals_total", { reason: "permission_denied" }) ?? 0) >= 1 ? s : undefined;
      },
      30_000,
      "a refused session",
    );
    expect(s.value("modelforge_sessions_connected")).toBe(0);
    await eventually(
      async () => (await scrape(serverMetrics)).value("modelforge_nodes", { state: "disabled" }) === 1,
      10_000,
      "the node counted as disabled",
    );
    const a = await scrape(agentMetrics);
    expect(a.value("modelforge_agent_reconnects_total", { reason: "permission_denied" })).toBeGreaterThanOrEqual(1);
    // No node-chosen or secret value in any label or sample.
    for (const text of [s.text, a.text]) {
      expect(text).not.toContain(node.nodeId);
      expect(text).not.toContain(nodeName);
      expect(text).not.toContain("mfet_");
    }
    await ts.admin.enableNode({ nodeId: node.nodeId });
  });
});

describe("CPU in telemetry", () => {
  it("is sampled by the agent, stored, returned by GetNode and shown by forge nodes get", async () => {
    const res = await eventually(
      async () => {
        const r = await ts.admin.getNode({ nodeId: node.nodeId });
        return r.telemetry?.telemetry?.cpuUtilizationPercent !== undefined ? r : undefined;
      },
      30_000,
      "telemetry with CPU utilisation",
    );
    const t = res.telemetry!.telemetry!;
    expect(t.cpuUtilizationPercent).toBeGreaterThanOrEqual(0);
    expect(t.cpuUtilizationPercent).toBeLessThanOrEqual(100);
    // This machine is never idle while tests run: the load averages are real, not zeros.
    expect(t.loadAverage1m + t.loadAverage5m + t.loadAverage15m).toBeGreaterThan(0);
    const text = renderNodeDetail(res, new Date());
    expect(text).toMatch(/CPU:\s+\d+(\.\d+)?%/);
    expect(text).toMatch(/Load:\s+\d+\.\d\d \d+\.\d\d \d+\.\d\d \(1m 5m 15m\)/);
  });
});
