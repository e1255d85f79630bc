// Job dispatch: latency from CreateJob to the lease arriving at the agent (p50, p99), and jobs
// completed per second, on one server with N real in-process agents (runAgent + JobRunner over
// mutual TLS, a handler that answers at once).
//
// Usage: npx tsx bench/dispatch.ts [agents=4] [latencyJobs=300] [throughputJobs=1000] [concurrency=16]
// The database is PGlite in a temporary directory, or PostgreSQL when DATABASE_URL is set or
// BENCH_DB=postgres (a throwaway database). REPLICAS=2 (PostgreSQL only): a second control plane
// on the same database and CA; the agents hold their sessions on the first, jobs are created and
// cancelled through the second, so every lease crosses replicas (the cluster bus, LISTEN/NOTIFY).
// RUNS (default 3): latency rounds, printed each and as median and range, with the load average
// and the Prisma round trip (SELECT 1) measured in the same run as a floor.
// Targets: p99 dispatch latency at most 20 ms on one server, at most 100 ms across replicas.
import { mkdtempSync, rmSync } from "node:fs";
import { cpus, loadavg, tmpdir } from "node:os";
import { join } from "node:path";
import { pino } from "pino";
import { createClient, type Interceptor } from "@connectrpc/connect";
import { grpcTransport } from "../common/http2-sessions.js";
import { AdminService, JobState } from "../gen/proto/modelforge/admin/v1/admin_pb.js";
import { Liveness } from "../gen/proto/modelforge/common/v1/common_pb.js";
import type { JobCancel } from "../gen/proto/modelforge/agent/v1/agent_pb.js";
import type { JobLease } from "../gen/proto/modelforge/jobs/v1/jobs_pb.js";
import { loadConfig } from "../server/config.js";
import { createLogger } from "../server/observability/logger.js";
import { startServer } from "../server/app.js";
import { enrollNode } from "../agent/enroll.js";
import { runAgent, type SessionJobs, type SessionLink } from "../agent/session/run.js";
import { CapabilityRegistry, openJobRunner } from "../agent/jobs/index.js";
import { createTestDatabase } from "../test/support/db.js";
import { numParam, param } from "./support/stats.js";

const [agentCount, latencyJobs, throughputJobs, concurrency] = [4, 300, 1000, 16].map((d, i) => Number(process.argv[2 + i] ?? d)) as [
  number,
  number,
  number,
  number,
];
const WARMUP = 30;
const key = "bench-admin-key-0123456789abcdef";

const REPLICAS = numParam("REPLICAS", 1);
const RUNS = Math.max(1, numParam("RUNS", 3));
const dir = mkdtempSync(join(tmpdir(), "mf-bench-dispatch-"));
const throwaway = param("BENCH_DB", "pglite") === "postgres" ? await createTestDatabase("postgres") : undefined;
const databaseUrl = throwaway?.databaseUrl ?? process.env.DATABASE_URL;
if (REPLICAS > 1 && !databaseUrl) throw new Error("REPLICAS=2 needs PostgreSQL: BENCH_DB=postgres or DATABASE_URL");
const configOf = (name: string) =>
  loadConfig({
    MODELFORGE_PORT: "0",
    MODELFORGE_DATA_DIR: join(dir, name),
    MODELFORGE_CERTS_DIR: join(dir, "certs"),
    MODELFORGE_OPERATOR_API_KEY: key,
    MODELFORGE_LOG_LEVEL: "warn",
    ...(databaseUrl ? { DATABASE_URL: databaseUrl } : {}),
  });
const server = await startServer(configOf("data"), createLogger("error"));
// The replica the operator talks to: the same one, or a second on the same database and CA.
const front = REPLICAS > 1 ? await startServer(configOf("data-b"), createLogger("error")) : server;
const stop = new AbortController();
try {
  const auth: Interceptor = (next) => (req) => {
    req.header.set("x-modelforge-admin-token", key);
    return next(req);
  };
  const admin = createClient(
    AdminService,
    grpcTransport({ baseUrl: front.url, nodeOptions: { ca: front.ca.certPem }, interceptors: [auth] }),
  );
  const quiet = pino({ level: "warn" });

  // Lease arrival, keyed by the runtime id each job carries.
  const arrivals = new Map<string, (at: number) => void>();
  const observe = (inner: SessionJobs): SessionJobs => ({
    capabilities: () => inner.capabilities(),
    runningJobIds: () => inner.runningJobIds(),
    onLease(lease: JobLease, link: SessionLink) {
      const at = performance.now();
      const tag = lease.spec?.kind.case === "runtimeHealth" ? lease.spec.kind.value.runtimeId : "";
      arrivals.get(tag)?.(at);
      inner.onLease(lease, link);
    },
    onCancel: (c: JobCancel) => inner.onCancel(c),
  });

  let completed = 0;
  const nodes: string[] = [];
  for (let i = 0; i < agentCount; i++) {
    const token = await admin.createEnrollmentToken({ nodeName: `bench-${i}` });
    const statePath = join(dir, `agent-${i}`, "state.json");
    const state = await enrollNode({ serverUrl: server.url, token: token.token, caFingerprint: server.ca.fingerprint, statePath });
    const registry = new CapabilityRegistry().register("runtime.health.v1", async () => {
      completed++;
      return { result: { case: "runtimeHealth", value: { healthy: true } } };
    });
    const runner = await openJobRunner({ statePath, log: quiet, signal: stop.signal, registry });
    void runAgent({ statePath, log: quiet, signal: stop.signal, jobs: observe(runner) });
    nodes.push(state.nodeId);
  }
  for (const nodeId of nodes) {
    for (;;) {
      const n = (await admin.getNode({ nodeId })).node!;
      if (server.sessionsConnected(nodeId) && n.liveness === Liveness.ONLINE && n.capabilities.includes("runtime.health.v1")) break;
      await new Promise((r) => setTimeout(r, 50));
    }
  }

  const createOne = async (tag: string, nodeId: string): Promise<number> => {
    const arrived = new Promise<number>((resolve) => arrivals.set(tag, resolve));
    const t0 = performance.now();
    await admin.createJob({ nodeId, spec: { kind: { case: "runtimeHealth", value: { runtimeId: tag } } } });
    const at = await arrived;
    arrivals.delete(tag);
    return at - t0;
  };

  // Latency: one job at a time, round-robin over the nodes, RUNS rounds.
  const rounds: { p50: number; p99: number; max: number; roundTrip: number; load: number }[] = [];
  let created = 0;
  for (let run = 0; run < RUNS; run++) {
    const latencies: number[] = [];
    for (let i = 0; i < (run === 0 ? WARMUP : 0) + latencyJobs; i++) {
      const ms = await createOne(`lat-${created++}`, nodes[i % nodes.length]!);
      if (run > 0 || i >= WARMUP) latencies.push(ms);
    }
    latencies.sort((a, b) => a - b);
    const pct = (p: number) => latencies[Math.min(latencies.length - 1, Math.ceil((p / 100) * latencies.length) - 1)]!;
    const t = performance.now();
    for (let i = 0; i < 100; i++) await front.db.prisma.$queryRaw`SELECT 1`;
    const roundTrip = (performance.now() - t) / 100;
    rounds.push({ p50: pct(50), p99: pct(99), max: latencies[latencies.length - 1]!, roundTrip, load: loadavg()[0]! });
    console.log(
      `run ${run + 1}: dispatch p50 ${pct(50).toFixed(2)} ms, p99 ${pct(99).toFixed(2)} ms, max ${latencies[latencies.length - 1]!.toFixed(2)} ms; ` +
        `Prisma round trip ${roundTrip.toFixed(2)} ms; load average ${loadavg()[0]!.toFixed(1)}`,
    );
  }
  const med = (v: number[]) => [...v].sort((a, b) => a - b)[Math.floor(v.length / 2)]!;
  const spread = (v: number[]) => `${med(v).toFixed(2)} (${Math.min(...v).toFixed(2)}-${Math.max(...v).toFixed(2)})`;

  // Throughput: `concurrency` creators, until every job has succeeded on the server.
  await waitSucceeded(WARMUP + latencyJobs * RUNS);
  const before = completed;
  const started = performance.now();
  let next = 0;
  await Promise.all(
    Array.from({ length: concurrency }, async () => {
      for (let i = next++; i < throughputJobs; i = next++) await createOne(`tp-${i}`, nodes[i % nodes.length]!);
    }),
  );
  await waitSucceeded(WARMUP + latencyJobs * RUNS + throughputJobs);
  const seconds = (performance.now() - started) / 1000;

  console.log(`cpu: ${cpus()[0]?.model ?? "unknown"} x${cpus().length}, node ${process.version}, database ${server.db.describe}`);
  const target = REPLICAS > 1 ? 100 : 20;
  console.log(
    `dispatch latency (CreateJob${REPLICAS > 1 ? " on replica B" : ""} -> lease at agent${REPLICAS > 1 ? " on replica A" : ""}), ` +
      `${latencyJobs} jobs x ${RUNS} runs over ${agentCount} agents, median (range) of runs: p50 ${spread(rounds.map((r) => r.p50))} ms, ` +
      `p99 ${spread(rounds.map((r) => r.p99))} ms, max ${spread(rounds.map((r) => r.max))} ms; floor: Prisma round trip ${spread(rounds.map((r) => r.roundTrip))} ms; ` +
      `load average ${spread(rounds.map((r) => r.load))}; target p99 <= ${target} ms: ${med(rounds.map((r) => r.p99)) <= target ? "met" : "NOT met"}`,
  );
  console.log(
    `throughput: ${throughputJobs} jobs created by ${concurrency} concurrent clients, completed in ${seconds.toFixed(2)} s: ` +
      `${(throughputJobs / seconds).toFixed(0)} jobs/s (handler runs: ${completed - before})`,
  );

  async function waitSucceeded(total: number): Promise<void> {
    for (;;) {
      const done = await server.db.prisma.job.count({ where: { state: "succeeded" } });
      if (done >= total) return;
      const failed = await server.db.prisma.job.count({ where: { state: { in: ["failed", "cancelled"] } } });
      if (failed > 0) throw new Error(`${failed} jobs did not succeed (${JobState[JobState.FAILED]})`);
      await new Promise((r) => setTimeout(r, 25));
    }
  }
} finally {
  stop.abort();
  if (front !== server) await front.stop();
  await server.stop();
  rmSync(dir, { recursive: true, force: true });
  await throwaway?.cleanup();
}
