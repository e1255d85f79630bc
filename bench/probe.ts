// runtime.probe.v1 overhead beyond the engine's own work.
//
// One in-process control plane and one in-process agent (runAgent + JobRunner + the real probe
// handler and Supervisor over mutual TLS) probe the tiny GGUF with the llama.cpp engine, N times.
// For each probe:
//   job time   from the lease arriving at the agent to the server recording the job SUCCEEDED;
//   engine     what the result says the engine spent: load (spawn to healthy) + time to first
//              token + the remaining tokens at the measured rate;
//   overhead   job time - engine: digest re-check, progress messages, memory and GPU readings,
//              unload (SIGTERM and wait), the completion's trip to the server.
// In the same rounds, the floor: llama-server started bare (spawn, its announced port, /health),
// the same fixed probe input streamed, then killed: no supervisor, no job, no server.
// Prints each round, the spread (min-median-max) over the rounds, and the load average.
//
//   npx tsx bench/probe.ts [rounds=6]        (DATABASE_URL=postgresql://... for PostgreSQL)
import { mkdtempSync, mkdirSync, rmSync } from "node:fs";
import { loadavg, tmpdir } from "node:os";
import { join } from "node:path";
import { pino } from "pino";
import { createClient, type Interceptor } from "@connectrpc/connect";
import { grpcTransport } from "../common/http2-sessions.js";
import { AdminService, JobState } from "../gen/proto/modelforge/admin/v1/admin_pb.js";
import type { JobCancel } from "../gen/proto/modelforge/agent/v1/agent_pb.js";
import { EngineKind, ProbeInput, type JobLease } from "../gen/proto/modelforge/jobs/v1/jobs_pb.js";
import { loadConfig } from "../server/config.js";
import { createLogger } from "../server/observability/logger.js";
import { startServer } from "../server/app.js";
import { enrollNode } from "../agent/enroll.js";
import { runAgent, type SessionJobs, type SessionLink } from "../agent/session/run.js";
import { openJobRunner } from "../agent/jobs/index.js";
import { capabilityRegistry } from "../agent/capabilities/index.js";
import { Supervisor } from "../agent/engines/supervisor.js";
import { startBareLlama } from "./support/bare-llama.js";
import { OpenAiClient } from "../agent/engines/openai-client.js";
import { probeInputs } from "../agent/capabilities/runtime.js";
import { writeTinyLlamaGguf } from "../scripts/gguf.js";

const rounds = Math.max(5, Number(process.argv[2] ?? 6));
const key = "bench-admin-key-0123456789abcdef";
const input = probeInputs[ProbeInput.COMPLETION_V1];

const dir = mkdtempSync(join(tmpdir(), "mf-bench-probe-"));
const root = join(dir, "root");
mkdirSync(root);
const modelPath = join(root, "tiny.gguf");
const model = await writeTinyLlamaGguf(modelPath);
const config = loadConfig({
  MODELFORGE_PORT: "0",
  MODELFORGE_DATA_DIR: join(dir, "data"),
  MODELFORGE_CERTS_DIR: join(dir, "certs"),
  MODELFORGE_OPERATOR_API_KEY: key,
  MODELFORGE_LOG_LEVEL: "warn",
  MODELFORGE_APPROVED_ROOTS: root,
  ...(process.env.DATABASE_URL ? { DATABASE_URL: process.env.DATABASE_URL } : {}),
});
const server = await startServer(config, createLogger("error"));
const stop = new AbortController();

/** The floor: llama-server alone, started, asked the probe input, killed. */
async function bare(): Promise<{ loadMs: number; totalMs: number }> {
  const t0 = performance.now();
  const llama = await startBareLlama(modelPath, 1024);
  const client = new OpenAiClient(llama.base);
  while (!(await client.healthy())) await new Promise((r) => setTimeout(r, 20));
  const loadMs = performance.now() - t0;
  for await (const _ of client.streamCompletion(input.prompt, { max_tokens: input.maxTokens, temperature: input.temperature })) void _;
  await llama.stop();
  return { loadMs, totalMs: performance.now() - t0 };
}

try {
  const auth: Interceptor = (next) => (req) => {
    req.header.set("x-modelforge-admin-token", key);
    return next(req);
  };
  const admin = createClient(
    AdminService,
    grpcTransport({ baseUrl: server.url, nodeOptions: { ca: server.ca.certPem }, interceptors: [auth] }),
  );
  const log = pino({ level: "warn" });
  const leasedAt = new Map<string, number>();
  const observe = (inner: SessionJobs): SessionJobs => ({
    capabilities: () => inner.capabilities(),
    engines: () => inner.engines?.() ?? [],
    runningJobIds: () => inner.runningJobIds(),
    onLease(lease: JobLease, link: SessionLink) {
      if (!leasedAt.has(lease.jobId)) leasedAt.set(lease.jobId, performance.now());
      inner.onLease(lease, link);
    },
    onCancel: (c: JobCancel) => inner.onCancel(c),
  });
  const token = await admin.createEnrollmentToken({ nodeName: "bench-probe" });
  const statePath = join(dir, "agent", "state.json");
  const state = await enrollNode({ serverUrl: server.url, token: token.token, caFingerprint: server.ca.fingerprint, statePath });
  const supervisor = new Supervisor({ registryPath: join(dir, "agent", "runtimes.json") });
  const registry = await capabilityRegistry({ statePath, log, env: {}, supervisor });
  const runner = await openJobRunner({ statePath, log, signal: stop.signal, registry });
  void runAgent({ statePath, log, signal: stop.signal, jobs: observe(runner) });
  for (;;) {
    const n = (await admin.getNode({ nodeId: state.nodeId })).node!;
    if (n.connected && n.capabilities.includes("runtime.probe.v1") && n.engines.includes("llama.cpp")) break;
    await new Promise((r) => setTimeout(r, 50));
  }

  await admin.createRuntimeProfile({ name: "tiny-cpu", engine: EngineKind.LLAMA_CPP, contextSize: 1024, threads: 1 });
  const probe = async () => {
    const { job } = await admin.createJob({
      nodeId: state.nodeId,
      maxAttempts: 1,
      spec: {
        kind: {
          case: "runtimeProbe",
          value: {
            runtimeProfile: "tiny-cpu",
            runtimeEnvironment: "cpu",
            artifacts: [{ path: modelPath, sha256: model.sha256 }],
            probeInputId: "completion-v1",
            probeInput: ProbeInput.COMPLETION_V1,
          },
        },
      },
    });
    const jobId = job!.id;
    // Straight from the database, every 2 ms: the finish is timed to within a few milliseconds.
    for (;;) {
      const row = await server.db.prisma.job.findUnique({ where: { id: jobId }, select: { state: true } });
      if (row?.state === "succeeded") break;
      if (row?.state === "failed" || row?.state === "cancelled") {
        const j = (await admin.getJob({ jobId })).job!;
        throw new Error(`probe ${JobState[j.state]}: ${j.failure?.message}`);
      }
      await new Promise((r) => setTimeout(r, 2));
    }
    const doneAt = performance.now();
    const j = (await admin.getJob({ jobId })).job!;
    const r = j.result!.result;
    if (r.case !== "runtimeProbe") throw new Error("not a probe result");
    const v = r.value;
    const ms = (d?: { seconds: bigint; nanos: number }) => Number(d?.seconds ?? 0n) * 1000 + (d?.nanos ?? 0) / 1e6;
    const loadMs = ms(v.loadDuration);
    const inferenceMs = ms(v.timeToFirstToken) + (v.tokensPerSecond > 0 ? ((v.tokensGenerated - 1) * 1000) / v.tokensPerSecond : 0);
    const jobMs = doneAt - leasedAt.get(jobId)!;
    return { jobMs, loadMs, engineMs: loadMs + inferenceMs };
  };

  // One of each first, unmeasured: module caches and the page cache warm for both.
  await bare();
  await probe();
  const load0 = loadavg();
  const rows: { jobMs: number; engineMs: number; loadMs: number; bareLoadMs: number; bareMs: number }[] = [];
  for (let i = 1; i <= rounds; i++) {
    const b = await bare();
    const p = await probe();
    rows.push({ ...p, bareLoadMs: b.loadMs, bareMs: b.totalMs });
    console.log(
      `round ${i}: job ${p.jobMs.toFixed(0)} ms = engine ${p.engineMs.toFixed(0)} ms (load ${p.loadMs.toFixed(0)}) + overhead ${(p.jobMs - p.engineMs).toFixed(0)} ms; ` +
        `bare llama-server: load ${b.loadMs.toFixed(0)} ms, load+probe+stop ${b.totalMs.toFixed(0)} ms; job - bare ${(p.jobMs - b.totalMs).toFixed(0)} ms; ` +
        `load ${loadavg()[0]!.toFixed(2)}`,
    );
  }
  const spread = (xs: number[]) => {
    const s = [...xs].sort((a, b) => a - b);
    return `${s[0]!.toFixed(0)} / ${s[Math.floor(s.length / 2)]!.toFixed(0)} / ${s.at(-1)!.toFixed(0)} ms`;
  };
  console.log(`over ${rounds} rounds, min / median / max:`);
  console.log(`  job (lease at agent -> SUCCEEDED on the server)  ${spread(rows.map((r) => r.jobMs))}`);
  console.log(`  engine's own load + inference (from the result)   ${spread(rows.map((r) => r.engineMs))}`);
  console.log(`  overhead beyond the engine (job - engine)         ${spread(rows.map((r) => r.jobMs - r.engineMs))}`);
  console.log(`  floor: bare llama-server load (spawn -> healthy)        ${spread(rows.map((r) => r.bareLoadMs))}`);
  console.log(`  floor: bare llama-server load + probe + stop            ${spread(rows.map((r) => r.bareMs))}`);
  console.log(`  job - bare floor                                  ${spread(rows.map((r) => r.jobMs - r.bareMs))}`);
  console.log(
    `load average before ${load0.map((l) => l.toFixed(2)).join(" ")}, after ${loadavg()
      .map((l) => l.toFixed(2))
      .join(" ")} (2 cores); database ${server.db.describe}`,
  );
  await supervisor.stopAll();
} finally {
  stop.abort();
  await server.stop();
  rmSync(dir, { recursive: true, force: true });
}
