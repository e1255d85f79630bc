// Replicas across a fleet (issue #35). A real control plane (its own process, MODELFORGE_REPLACE_AFTER
// 1s), BENCH_AGENTS real agents (each its own process, the agent of bench/invoke.ts) whose runtime is
// the stub OpenAI server (bench/support/stub-openai.ts: a fixed answer, no inference), deployment
// "one" with 1 replica and "four" with 4 (at most one a node), and this process as the service
// client over gRPC with a service key. Per run it prints:
//   (a) routing cost: BENCH_SEQUENTIAL invokes one at a time of each deployment, interleaved in
//       blocks of 100 so both see the same machine; "added" is four minus one, per percentile;
//   (c) evenness: each replica's share of the four's sequential invokes (the response's `replica`),
//       then of BENCH_SPREAD invokes BENCH_SPREAD_CONCURRENCY at once;
//   (b) failover (BENCH_FAILOVERS times): kill -9 of an agent holding a replica of "four" and of its
//       runtime, under BENCH_FAILOVER_CONCURRENCY invokes in flight; from the kill: the node seen
//       disconnected (GetNode polled every 25 ms), the end of the last failed invoke (requests
//       stop failing), the replacement LOADING and READY on another node (the deployment's events,
//       and GetDeployment polled); the engine's own load time (the stub spawned alone, to its
//       /health) beside it. The killed agent is started again as the spare for the next run.
// Floors of the same run: the stub called directly over HTTP, a gRPC health check through the
// control plane. os.loadavg() and the core count, `openssl speed rsa2048`'s sign time.
//
//   npx tsx bench/fleet.ts   BENCH_RUNS=3 BENCH_SEQUENTIAL=600 BENCH_SPREAD=800 BENCH_SPREAD_CONCURRENCY=8
//                            BENCH_FAILOVERS=3 BENCH_FAILOVER_CONCURRENCY=2 BENCH_AGENTS=5
import { spawn, type ChildProcess } from "node:child_process";
import { createHash } from "node:crypto";
import { mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync } from "node:fs";
import { cpus, loadavg, tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { ConnectError, createClient, type Client, type Interceptor } from "@connectrpc/connect";
import { grpcTransport } from "../common/http2-sessions.js";
import { AdminService } from "../gen/proto/modelforge/admin/v1/admin_pb.js";
import { DeploymentService, DeploymentState } from "../gen/proto/modelforge/deployment/v1/deployment_pb.js";
import { EngineKind } from "../gen/proto/modelforge/jobs/v1/jobs_pb.js";
import { Health } from "../gen/proto/grpc/health/v1/health_pb.js";
import { enrollNode } from "../agent/enroll.js";
import { InFlight, pickReplica, replicaKey } from "../server/invoke/rules.js";
import { freePort } from "../test/support/ports.js";
import { forkTs, Rpc } from "./support/ipc.js";
import { benchServerEnv } from "./support/server-env.js";
import { ms, numParam, rsaSignMs, sleep, summarize, type Summary } from "./support/stats.js";

const runs = numParam("BENCH_RUNS", 3);
const sequential = numParam("BENCH_SEQUENTIAL", 600);
const spreadCount = numParam("BENCH_SPREAD", 800);
const spreadConcurrency = numParam("BENCH_SPREAD_CONCURRENCY", 8);
const failovers = numParam("BENCH_FAILOVERS", 3);
const failoverConcurrency = numParam("BENCH_FAILOVER_CONCURRENCY", 2);
const agentCount = Math.max(5, numParam("BENCH_AGENTS", 5));
const block = 50;
const adminKey = "bench-admin-key-0123456789abcdef";
const stubPath = fileURLToPath(new URL("./support/stub-openai.ts", import.meta.url));

const step = (what: string) => process.stderr.write(`${what}\n`);
const header =
  (name: string, value: string): Interceptor =>
  (next) =>
  (req) => {
    req.header.set(name, value);
    return next(req);
  };

// ---------------------------------------------------------------- the fleet

const dir = mkdtempSync(join(tmpdir(), "mf-bench-fleet-"));
const children = new Set<ChildProcess>();
process.on("exit", () => {
  for (const c of children) c.kill("SIGKILL");
});
const serverChild = forkTs(new URL("./support/invoke-server.ts", import.meta.url), {
  env: benchServerEnv(dir, adminKey, { MODELFORGE_LOG_LEVEL: "warn", MODELFORGE_APPROVED_ROOTS: dir, MODELFORGE_REPLACE_AFTER: "1s" }),
});
children.add(serverChild);
const server = new Rpc(serverChild, "server");
await server.waitFor("ready");
const info = await server.call<{ url: string; caPem: string; fingerprint: string }>("info");
const transport = (interceptors: Interceptor[] = []) => grpcTransport({ baseUrl: info.url, nodeOptions: { ca: info.caPem }, interceptors });
const admin = createClient(AdminService, transport([header("x-modelforge-admin-token", adminKey)]));
type Admin = Client<typeof AdminService>;

interface FleetAgent {
  nodeId: string;
  statePath: string;
  child: ChildProcess;
}

async function until<T>(check: () => Promise<T | undefined>, what: string, timeoutMs = 90_000): Promise<T> {
  const end = Date.now() + timeoutMs;
  for (;;) {
    const v = await check();
    if (v !== undefined) return v;
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await sleep(50);
  }
}

function startAgent(statePath: string): ChildProcess {
  const child = forkTs(new URL("./support/invoke-agent.ts", import.meta.url), {
    env: { ...process.env, BENCH_AGENT_STATE: statePath, BENCH_AGENT_ROOT: dir },
  });
  children.add(child);
  child.once("exit", () => children.delete(child));
  return child;
}

/** Placement wants the node's capabilities, its telemetry and a stored heartbeat. */
const placeable = (a: Admin, nodeId: string) =>
  until(async () => {
    const got = await a.getNode({ nodeId });
    const n = got.node;
    return n?.connected && n.capabilities.includes("deployment.load.v1") && n.lastHeartbeatAt && got.telemetry ? true : undefined;
  }, `node ${nodeId} placeable`);

async function enrollAgent(i: number): Promise<FleetAgent> {
  const token = await admin.createEnrollmentToken({ nodeName: `fleet-${i}`, labels: { pool: "fleet" } });
  const statePath = join(dir, `agent-${i}`, "state.json");
  mkdirSync(join(dir, `agent-${i}`), { recursive: true });
  const state = await enrollNode({ serverUrl: info.url, token: token.token, caFingerprint: info.fingerprint, statePath });
  return { nodeId: state.nodeId, statePath, child: startAgent(statePath) };
}

step(`starting ${agentCount} agents`);
const agents = await Promise.all(Array.from({ length: agentCount }, (_, i) => enrollAgent(i)));
for (const a of agents) await placeable(admin, a.nodeId);

await admin.createRuntimeProfile({ name: "stub", engine: EngineKind.OPENAI_HTTP });
const model = Buffer.from("stub model");
const at = { repository: "bench/fleet", commit: "b".repeat(40) };
await admin.uploadArtifactChunk({
  ...at,
  path: "model.bin",
  sizeBytes: BigInt(model.length),
  sha256: createHash("sha256").update(model).digest("hex"),
  offset: 0n,
  data: model,
});

async function allReady(name: string, want: number) {
  await until(async () => {
    const d = (await admin.getDeployment({ deployment: name })).deployment!;
    const ready = d.replicas.filter((r) => r.state === DeploymentState.READY && r.revision === d.deployment!.revision);
    return ready.length === want ? true : undefined;
  }, `${name}: ${want} replicas READY`);
}

step("deploying one (1 replica) and four (4 replicas)");
for (const [name, replicas] of [
  ["one", 1],
  ["four", 4],
] as const) {
  await admin.createDeployment({
    name,
    selector: { pool: "fleet" },
    runtimeProfile: "stub",
    ...at,
    targetRoot: dir,
    maxInFlight: 1024,
    replicas,
    maxPerNode: 1,
  });
  await allReady(name, replicas);
}
const { secret } = await admin.createServiceKey({ name: "fleet", deployments: ["one", "four"] });
const service = createClient(DeploymentService, transport([header("authorization", `Bearer ${secret}`)]));
const health = createClient(Health, transport());

/** The stub started alone: ms from spawn to its first healthy /health (the engine's own load time), and its origin. */
async function startStub(): Promise<{ loadMs: number; origin: string; child: ChildProcess }> {
  const port = await freePort();
  const t = performance.now();
  const child = spawn(process.execPath, ["--import", "tsx", stubPath, "--port", String(port)], { stdio: "ignore" });
  children.add(child);
  const origin = `http://127.0.0.1:${port}`;
  for (;;) {
    if ((await fetch(`${origin}/health`).catch(() => undefined))?.ok) break;
    if (performance.now() - t > 30_000) throw new Error("the stub did not start");
    await sleep(5);
  }
  return { loadMs: performance.now() - t, origin, child };
}
const directStub = await startStub();

// ---------------------------------------------------------------- calls

const body = JSON.stringify({ prompt: "The quick brown fox", max_tokens: 1 });
const payload = Buffer.from(body);
const invoke = (deploymentId: string, timeoutMs = 30_000) =>
  service.invoke({ deploymentId, contentType: "application/json", payload }, { timeoutMs });
const direct = async () => {
  const res = await fetch(`${directStub.origin}/v1/completions`, { method: "POST", headers: { "content-type": "application/json" }, body });
  await res.arrayBuffer();
};

async function timed(call: () => Promise<unknown>, n: number, out: number[]): Promise<void> {
  for (let i = 0; i < n; i++) {
    const t = performance.now();
    await call();
    out.push(performance.now() - t);
  }
}

interface RoutingRun {
  one: Summary;
  four: Summary;
  direct: Summary;
  health: Summary;
  /** Invokes answered per replica slot of "four", one at a time and then concurrently. */
  sequentialShares: number[];
  /** p50 ms of the four's sequential invokes by the slot that answered; the slot on the node of "one". */
  bySlot: number[];
  sharedSlot: number;
  concurrentShares: number[];
  /** ns per routing decision among 1 and among 4 replicas. */
  decision: [number, number];
  load: number;
}

/** The slot of "four" on the node that serves "one" (-1 when none): its agent is kept busy by both. */
async function slotBesideOne(): Promise<number> {
  const one = (await admin.getDeployment({ deployment: "one" })).deployment!.replicas[0]?.nodeId;
  const four = (await admin.getDeployment({ deployment: "four" })).deployment!.replicas;
  return four.find((r) => r.nodeId === one)?.index ?? -1;
}

async function routingRun(): Promise<RoutingRun> {
  for (let i = 0; i < 50; i++) await Promise.all([invoke("one"), invoke("four"), direct(), health.check({})]); // warm up
  const one: number[] = [];
  const four: number[] = [];
  const d: number[] = [];
  const h: number[] = [];
  const seq = [0, 0, 0, 0];
  const slotTimes: number[][] = [[], [], [], []];
  for (let done = 0; done < sequential; done += block) {
    const n = Math.min(block, sequential - done);
    await timed(() => invoke("one"), n, one);
    for (let i = 0; i < n; i++) {
      const t = performance.now();
      const { replica } = await invoke("four");
      four.push(performance.now() - t);
      seq[replica]!++;
      slotTimes[replica]!.push(performance.now() - t);
    }
    await timed(direct, n, d);
    await timed(() => health.check({}), n, h);
  }
  const conc = [0, 0, 0, 0];
  let next = 0;
  await Promise.all(
    Array.from({ length: spreadConcurrency }, async () => {
      while (next++ < spreadCount) conc[(await invoke("four")).replica]!++;
    }),
  );
  return {
    one: summarize(one),
    four: summarize(four),
    direct: summarize(d),
    health: summarize(h),
    sequentialShares: seq,
    bySlot: slotTimes.map((t) => summarize(t).p50),
    sharedSlot: await slotBesideOne(),
    concurrentShares: conc,
    decision: [decisionNs(1), decisionNs(4)],
    load: loadavg()[0]!,
  };
}

/**
 * The relay's routing decision alone, in this process: ns per pick among `n` replicas, their loads
 * read from an InFlight as the relay reads them. What the 4-over-1 difference can owe the code.
 */
function decisionNs(n: number, picks = 1_000_000): number {
  const inFlight = new InFlight();
  const replicas = Array.from({ length: n }, (_, i) => ({ revision: 1n, replica: i }));
  const load = (r: { revision: bigint; replica: number }) => ({
    inFlight: inFlight.of(replicaKey("deployment", r.revision, r.replica)),
    queued: 0,
  });
  let sink = 0;
  const t = performance.now();
  for (let i = 0; i < picks; i++) sink += pickReplica(replicas, load, 1024, Math.random) === replicas[0] ? 1 : 0;
  const elapsed = performance.now() - t;
  if (sink < 0) throw new Error("unreachable");
  return (elapsed * 1e6) / picks;
}

// ---------------------------------------------------------------- failover

/** The process and its descendants (from /proc), so a kill takes the runtime it started with it. */
function processTree(pid: number): number[] {
  const out = [pid];
  for (let i = 0; i < out.length; i++) {
    let tasks: string[] = [];
    try {
      tasks = readdirSync(`/proc/${out[i]}/task`);
    } catch {
      continue;
    }
    for (const t of tasks) {
      const kids = readFileSync(`/proc/${out[i]}/task/${t}/children`, "utf8").trim();
      if (kids !== "") out.push(...kids.split(" ").map(Number));
    }
  }
  return out;
}

interface Sent {
  start: number;
  end: number;
  ok: boolean;
  replica: number;
  error?: string;
}

interface FailoverRun {
  slot: number;
  /** ms from the kill to each moment; NaN when not seen. */
  disconnected: number;
  /**
   * The end of the last invoke that failed, or that started before the session close was seen and
   * took over twice the slowest of the 500 ms before the kill (held by the dead replica); 0 when none.
   */
  lastBad: number;
  failed: number;
  stalled: number;
  firstError: string;
  /** The slot's first PENDING (the controller decided to place it again). */
  pending: number;
  /** Times it was placed on the killed node again before another. */
  placedOnDead: number;
  /** The reason of the PENDING that sent it to another node. */
  movedBecause: string;
  loading: number;
  ready: number;
  engineLoad: number;
  load: number;
}

/** Invokes of "four", `failoverConcurrency` at once, until `stop` says so. */
async function traffic(log: Sent[], stop: { now: boolean }): Promise<void> {
  await Promise.all(
    Array.from({ length: failoverConcurrency }, async () => {
      while (!stop.now) {
        const start = performance.now();
        try {
          const r = await invoke("four", 10_000);
          log.push({ start, end: performance.now(), ok: true, replica: r.replica });
        } catch (err) {
          log.push({ start, end: performance.now(), ok: false, replica: -1, error: ConnectError.from(err).message });
        }
      }
    }),
  );
}

/** A replica of "four" READY, on a node not also holding "one" when there is one (only "four" is then re-placed). */
async function pickVictim() {
  const { deployment: d } = await admin.getDeployment({ deployment: "four" });
  const oneNodes = new Set((await admin.getDeployment({ deployment: "one" })).deployment!.replicas.map((r) => r.nodeId));
  const ready = d!.replicas.filter((r) => r.state === DeploymentState.READY && r.revision === d!.deployment!.revision);
  const victim = ready.find((r) => !oneNodes.has(r.nodeId)) ?? ready[0]!;
  return { slot: victim.index, agent: agents.find((a) => a.nodeId === victim.nodeId)! };
}

async function failoverRun(): Promise<FailoverRun> {
  const { slot, agent } = await pickVictim();
  const log: Sent[] = [];
  const stop = { now: false };
  const running = traffic(log, stop);
  await sleep(500);

  const tree = processTree(agent.child.pid!);
  const killedAt = performance.now();
  const killedWall = Date.now();
  for (const pid of tree) process.kill(pid, "SIGKILL");
  const disconnected = until(
    async () => ((await admin.getNode({ nodeId: agent.nodeId })).node!.connected ? undefined : performance.now() - killedAt),
    "disconnected",
    120_000,
  );
  const replaced = until(
    async () => {
      const cur = (await admin.getDeployment({ deployment: "four" })).deployment!;
      const back = cur.replicas.find((r) => r.index === slot && r.nodeId !== agent.nodeId && r.state === DeploymentState.READY);
      return back === undefined ? undefined : performance.now() - killedAt;
    },
    "the replacement READY",
    120_000,
  );
  const [gone, readyPolled] = [await disconnected, await replaced];
  await sleep(300);
  stop.now = true;
  await running;

  const at = (t: { seconds: bigint; nanos: number }) => Number(t.seconds) * 1000 + t.nanos / 1e6 - killedWall;
  const events = (await admin.getDeployment({ deployment: "four" })).events.filter((e) => e.replica === slot && at(e.time!) >= -5);
  const first = (to: DeploymentState, onDead: boolean) => events.find((e) => e.toState === to && (e.nodeId === agent.nodeId) === onDead);
  const moved = first(DeploymentState.LOADING, false);
  const movedAt = moved === undefined ? -1 : events.indexOf(moved);
  const ready = first(DeploymentState.READY, false);
  const pending = events.find((e) => e.toState === DeploymentState.PENDING);
  const before = log.filter((s) => s.end < killedAt);
  const slowBefore = Math.max(0, ...before.map((s) => s.end - s.start));
  const after = log.filter((s) => s.end >= killedAt);
  const bad = after.filter((s) => !s.ok || (s.start < killedAt + gone && s.end - s.start > 2 * slowBefore));
  const engine = await startStub();
  engine.child.kill();

  // The killed node comes back as the next run's spare.
  agent.child = startAgent(agent.statePath);
  await placeable(admin, agent.nodeId);
  await allReady("four", 4);
  return {
    slot,
    disconnected: gone,
    lastBad: bad.length === 0 ? 0 : Math.max(...bad.map((s) => s.end)) - killedAt,
    failed: after.filter((s) => !s.ok).length,
    stalled: bad.filter((s) => s.ok).length,
    firstError: after.find((s) => !s.ok)?.error ?? "",
    pending: pending === undefined ? Number.NaN : at(pending.time!),
    placedOnDead: events.filter(
      (e, i) => e.toState === DeploymentState.LOADING && e.nodeId === agent.nodeId && (movedAt < 0 || i < movedAt),
    ).length,
    movedBecause: movedAt > 0 ? events[movedAt - 1]!.reason : "",
    loading: moved === undefined ? Number.NaN : at(moved.time!),
    ready: ready === undefined ? readyPolled : at(ready.time!),
    engineLoad: engine.loadMs,
    load: loadavg()[0]!,
  };
}

// ---------------------------------------------------------------- the runs and the report

const signMs = await rsaSignMs();
const loadBefore = loadavg();
const routing: RoutingRun[] = [];
for (let run = 1; run <= runs; run++) {
  step(`routing run ${run}`);
  routing.push(await routingRun());
}
const failover: FailoverRun[] = [];
for (let run = 1; run <= failovers; run++) {
  step(`failover run ${run}`);
  failover.push(await failoverRun());
}

const spread = (xs: number[], f = ms) => {
  const s = [...xs].filter((x) => !Number.isNaN(x)).sort((a, b) => a - b);
  return s.length === 0 ? "-" : `${f(s[Math.floor((s.length - 1) / 2)]!)} (${f(s[0]!)}-${f(s.at(-1)!)})`;
};
const pct = (counts: number[]) => {
  const total = counts.reduce((a, b) => a + b, 0);
  return counts.map((c) => ((100 * c) / total).toFixed(1));
};
const shareRange = (counts: number[]) => {
  const p = pct(counts).map(Number);
  return `${Math.min(...p).toFixed(1)}-${Math.max(...p).toFixed(1)} %`;
};
const added = (r: RoutingRun, p: "p50" | "p99") => r.four[p] - r.one[p];
const lines = [
  `fleet: ${agentCount} agents (real processes), stub runtime (no inference); ${runs} routing runs of ${sequential} sequential invokes per deployment in blocks of ${block}; ${failovers} failovers`,
  "",
  "(a) routing cost, one at a time: p50/p99 ms",
  "run  one replica  four replicas  added  direct stub (floor)  gRPC health (floor)  load",
  ...routing.map(
    (r, i) =>
      `${i + 1}  ${ms(r.one.p50)}/${ms(r.one.p99)}  ${ms(r.four.p50)}/${ms(r.four.p99)}  ${ms(added(r, "p50"))}/${ms(added(r, "p99"))}  ${ms(r.direct.p50)}/${ms(r.direct.p99)}  ${ms(r.health.p50)}/${ms(r.health.p99)}  ${r.load.toFixed(2)}`,
  ),
  `the routing decision alone (pickReplica over InFlight, in this process), ns per pick: 1 replica ${spread(routing.map((r) => r.decision[0]))}, 4 replicas ${spread(routing.map((r) => r.decision[1]))}`,
  `added by 4 replicas over 1, median (range) of runs: p50 ${spread(routing.map((r) => added(r, "p50")))} ms, p99 ${spread(routing.map((r) => added(r, "p99")))} ms (target p99 <= 0.5 ms)`,
  "",
  `(c) share of each replica slot 0-3 of "four": ${sequential} sequential; ${spreadCount} at ${spreadConcurrency} in flight (even: 25 %)`,
  ...routing.map(
    (r, i) =>
      `run ${i + 1}: sequential ${pct(r.sequentialShares).join(" / ")} % (p50 ${r.bySlot.map(ms).join(" / ")} ms; slot ${r.sharedSlot} shares the node of "one"); concurrent ${pct(r.concurrentShares).join(" / ")} %`,
  ),
  `smallest-largest share per run: sequential ${routing.map((r) => shareRange(r.sequentialShares)).join(", ")}; concurrent ${routing
    .map((r) => shareRange(r.concurrentShares))
    .join(", ")}`,
  "",
  `(b) failover under ${failoverConcurrency} invokes in flight: ms from kill -9 (agent and its runtime); GetNode and GetDeployment polled`,
  "run  slot  disconnected  last failed/stalled invoke ended (failed, stalled)  PENDING  placed on the killed node again  LOADING elsewhere  READY elsewhere  engine load  load",
  ...failover.map(
    (f, i) =>
      `${i + 1}  ${f.slot}  ${ms(f.disconnected)}  ${ms(f.lastBad)} (${f.failed}, ${f.stalled}${f.firstError ? `: ${f.firstError}` : ""})  ${ms(f.pending)}  ${f.placedOnDead}x  ${ms(f.loading)}  ${ms(f.ready)}  ${ms(f.engineLoad)}  ${f.load.toFixed(2)}`,
  ),
  ...failover.filter((f) => f.placedOnDead > 0).map((f) => `  slot ${f.slot} left the killed node only once: ${f.movedBecause}`),
  `kill to disconnected: ${spread(failover.map((f) => f.disconnected))} ms; to requests no longer failing or stalling: ${spread(failover.map((f) => f.lastBad))} ms, after the session closed ${spread(failover.map((f) => Math.max(0, f.lastBad - f.disconnected)))} ms (target <= 1000)`,
  `kill to replacement READY: ${spread(failover.map((f) => f.ready))} ms (target <= 5000 + engine load); engine load alone ${spread(failover.map((f) => f.engineLoad))} ms; LOADING to READY elsewhere ${spread(failover.map((f) => f.ready - f.loading))} ms`,
  `openssl speed rsa2048 sign: ${ms(signMs)} ms; loadavg before ${loadBefore.map((l) => l.toFixed(2)).join(" ")}, after ${loadavg()
    .map((l) => l.toFixed(2))
    .join(" ")} (${cpus().length} cores)`,
  "",
];
process.stdout.write(lines.join("\n"));

directStub.child.kill();
for (const a of agents) a.child.kill("SIGTERM");
await Promise.all(agents.map((a) => new Promise((r) => (a.child.exitCode !== null ? r(undefined) : a.child.once("exit", r)))));
await server.call("stop").catch(() => undefined);
await server.exit();
rmSync(dir, { recursive: true, force: true });
process.exit(0);
