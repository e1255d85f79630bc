// The invoke relay's cost. A real control plane (its own process), a real agent (its own process)
// holding a deployment whose runtime is a trivial stub OpenAI server (bench/support/stub-openai.ts:
// a fixed answer, no inference, so what is measured is the relay), and this process as the service
// client over gRPC with a service key. It prints, per run and as the spread of runs:
//   - latency of one request at a time: calling the stub directly over HTTP (the floor the relay
//     adds to), a gRPC Health check through the control plane (the transport's own floor), and
//     Invoke through the relay; "added" is relay minus direct, per percentile;
//   - invokes/s through the one replica with BENCH_CONCURRENCY requests in flight;
//   - what one durable job-like row per invoke would cost the database (insert and two updates,
//     as a job's create, lease and complete), in rows/s at the same concurrency: the ceiling such
//     a design would put on invokes/s.
// os.loadavg() before and after: the machine is shared, so figures move with its load.
//
//   npx tsx bench/invoke.ts        BENCH_RUNS=3 BENCH_SEQUENTIAL=1000 BENCH_SECONDS=3 BENCH_CONCURRENCY=64
import { spawn } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { createServer } from "node:net";
import { loadavg, tmpdir } from "node:os";
import { join } from "node:path";
import { createHash } from "node:crypto";
import { fileURLToPath } from "node:url";
import { createClient, type Interceptor } from "@connectrpc/connect";
import { createGrpcTransport } from "@connectrpc/connect-node";
import { AdminService } from "../gen/proto/modelforge/admin/v1/admin_pb.js";
import { DeploymentService, DeploymentState } from "../gen/proto/modelforge/deployment/v1/deployment_pb.js";
import { Health } from "../gen/proto/grpc/health/v1/health_pb.js";
import { EngineKind } from "../gen/proto/modelforge/jobs/v1/jobs_pb.js";
import { enrollNode } from "../agent/enroll.js";
import { forkTs, Rpc } from "./support/ipc.js";
import { ms, summarize, type Summary } from "./support/stats.js";

const num = (name: string, fallback: number) => Number(process.env[name] ?? fallback);
const runs = num("BENCH_RUNS", 3);
const sequential = num("BENCH_SEQUENTIAL", 1000);
const seconds = num("BENCH_SECONDS", 3);
const concurrency = num("BENCH_CONCURRENCY", 64);
const adminKey = "bench-admin-key-0123456789abcdef";

const step = (what: string) => process.stderr.write(`${what}\n`);
const dir = mkdtempSync(join(tmpdir(), "mf-bench-invoke-"));
const loadBefore = loadavg();
const serverChild = forkTs(new URL("./support/invoke-server.ts", import.meta.url), {
  env: {
    ...process.env,
    MODELFORGE_LISTEN_ADDRESS: "127.0.0.1",
    MODELFORGE_PORT: "0",
    MODELFORGE_DATA_DIR: join(dir, "data"),
    MODELFORGE_CERTS_DIR: join(dir, "certs"),
    MODELFORGE_OPERATOR_API_KEY: adminKey,
    MODELFORGE_LOG_LEVEL: "warn",
    MODELFORGE_APPROVED_ROOTS: dir,
  },
});
// Whatever happens, the children end with this process.
const children: { kill(): unknown }[] = [serverChild];
process.on("exit", () => {
  for (const c of children) c.kill();
});
const server = new Rpc(serverChild, "server");
await server.waitFor("ready");
const info = await server.call<{ url: string; caPem: string; fingerprint: string }>("info");
const header =
  (name: string, value: string): Interceptor =>
  (next) =>
  (req) => {
    req.header.set(name, value);
    return next(req);
  };
const transport = (interceptors: Interceptor[] = []) =>
  createGrpcTransport({ baseUrl: info.url, nodeOptions: { ca: info.caPem }, interceptors });
const admin = createClient(AdminService, transport([header("x-modelforge-admin-token", adminKey)]));

const token = await admin.createEnrollmentToken({ nodeName: "bench" });
const statePath = join(dir, "agent", "state.json");
const state = await enrollNode({ serverUrl: info.url, token: token.token, caFingerprint: info.fingerprint, statePath });
const agentChild = forkTs(new URL("./support/invoke-agent.ts", import.meta.url), {
  env: { ...process.env, BENCH_AGENT_STATE: statePath, BENCH_AGENT_ROOT: dir },
});
children.push(agentChild);
const until = async <T>(check: () => Promise<T | undefined>, what: string): Promise<T> => {
  const end = Date.now() + 60_000;
  for (;;) {
    const v = await check();
    if (v !== undefined) return v;
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 100));
  }
};
step("agent starting");
await until(async () => {
  // Placement needs the node's telemetry (its disk) as well as its capabilities.
  const got = await admin.getNode({ nodeId: state.nodeId });
  return got.node?.capabilities.includes("deployment.load.v1") && got.telemetry !== undefined ? true : undefined;
}, "the agent");
await admin.createRuntimeProfile({ name: "stub", engine: EngineKind.OPENAI_HTTP });
// The deployment's "model" is a small file in the artifact store: the stub runtime ignores it.
const model = Buffer.from("stub model");
const repository = "bench/stub";
const commit = "a".repeat(40);
await admin.uploadArtifactChunk({
  repository,
  commit,
  path: "model.bin",
  sizeBytes: BigInt(model.length),
  sha256: createHash("sha256").update(model).digest("hex"),
  offset: 0n,
  data: model,
});
step("loading the stub deployment");
await admin.createDeployment({
  name: "bench",
  nodeId: state.nodeId,
  runtimeProfile: "stub",
  repository,
  commit,
  targetRoot: dir,
  maxInFlight: 1024,
});
await until(
  async () =>
    (await admin.getDeployment({ deployment: "bench" })).deployment?.deployment?.state === DeploymentState.READY ? true : undefined,
  "the deployment READY",
);
const { secret } = await admin.createServiceKey({ name: "bench", deployments: ["bench"] });
const service = createClient(DeploymentService, transport([header("authorization", `Bearer ${secret}`)]));
const health = createClient(Health, transport());

// The same stub, started alone, for the direct calls.
const stubPort = await freePort();
const stub = spawn(
  process.execPath,
  ["--import", "tsx", fileURLToPath(new URL("./support/stub-openai.ts", import.meta.url)), "--port", String(stubPort)],
  {
    stdio: "ignore",
  },
);
children.push(stub);
const stubUrl = `http://127.0.0.1:${stubPort}/v1/completions`;
await until(async () => ((await fetch(`http://127.0.0.1:${stubPort}/health`).catch(() => undefined))?.ok ? true : undefined), "the stub");

const body = JSON.stringify({ prompt: "The quick brown fox", max_tokens: 1 });
const payload = Buffer.from(body);
const direct = async () => {
  const res = await fetch(stubUrl, { method: "POST", headers: { "content-type": "application/json" }, body });
  await res.arrayBuffer();
};
const relayed = async () => {
  await service.invoke({ deploymentId: "bench", contentType: "application/json", payload });
};
const floor = async () => {
  await health.check({ service: "" });
};

async function latencies(call: () => Promise<void>, n: number): Promise<Summary> {
  for (let i = 0; i < 50; i++) await call(); // warm up connections and code paths
  const out = new Float64Array(n);
  for (let i = 0; i < n; i++) {
    const t = performance.now();
    await call();
    out[i] = performance.now() - t;
  }
  return summarize(out);
}

async function throughput(call: () => Promise<void>): Promise<{ perSecond: number; failed: number; p99: number }> {
  const end = performance.now() + seconds * 1000;
  let done = 0;
  let failed = 0;
  const times: number[] = [];
  await Promise.all(
    Array.from({ length: concurrency }, async () => {
      while (performance.now() < end) {
        const t = performance.now();
        try {
          await call();
          done++;
          times.push(performance.now() - t);
        } catch {
          failed++;
        }
      }
    }),
  );
  return { perSecond: done / seconds, failed, p99: summarize(times).p99 };
}

const rows: string[][] = [];
const perRun: { addedP50: number; addedP99: number; rate: number }[] = [];
for (let run = 1; run <= runs; run++) {
  step(`run ${run}`);
  const d = await latencies(direct, sequential);
  const f = await latencies(floor, sequential);
  const r = await latencies(relayed, sequential);
  const t = await throughput(relayed);
  const dt = await throughput(direct);
  perRun.push({ addedP50: r.p50 - d.p50, addedP99: r.p99 - d.p99, rate: t.perSecond });
  rows.push([
    String(run),
    `${ms(d.p50)}/${ms(d.p99)}`,
    `${ms(f.p50)}/${ms(f.p99)}`,
    `${ms(r.p50)}/${ms(r.p99)}`,
    `${ms(r.p50 - d.p50)}/${ms(r.p99 - d.p99)}`,
    `${Math.round(t.perSecond)} (p99 ${ms(t.p99)} ms, ${t.failed} failed)`,
    String(Math.round(dt.perSecond)),
  ]);
}
const durable = await server.call<{ perSecond: number }>("durableRows", { ms: seconds * 1000, concurrency });
const loadAfter = loadavg();

const spread = (xs: number[]) => `${ms(Math.min(...xs))} .. ${ms(Math.max(...xs))}`;
process.stdout.write(
  [
    `invoke relay: ${runs} runs; ${sequential} sequential calls per path per run; ${seconds} s at ${concurrency} in flight for throughput`,
    "the runtime is a trivial stub OpenAI server (fixed answer, no inference): the relay's cost, not a model's",
    "",
    "run  direct p50/p99 ms  floor(gRPC health) p50/p99  relay p50/p99  added p50/p99  relay invokes/s  direct req/s",
    ...rows.map((r) => r.join("  ")),
    "",
    `added latency p50: ${spread(perRun.map((p) => p.addedP50))} ms; p99: ${spread(perRun.map((p) => p.addedP99))} ms (target p99 <= 10 ms)`,
    `relay invokes/s: ${spread(perRun.map((p) => p.rate))} (target >= 1000)`,
    `one durable job-like row per invoke (insert + 2 updates, ${concurrency} at once, ${process.env.DATABASE_URL ? "PostgreSQL" : "PGlite"}): ${Math.round(durable.perSecond)}/s`,
    `loadavg before: ${loadBefore.map((l) => l.toFixed(2)).join(" ")}; after: ${loadAfter.map((l) => l.toFixed(2)).join(" ")} (${(await import("node:os")).cpus().length} cores)`,
    "",
  ].join("\n"),
);

stub.kill();
agentChild.kill("SIGTERM");
await server.call("stop").catch(() => undefined);
await server.exit();
rmSync(dir, { recursive: true, force: true });

function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const s = createServer();
    s.once("error", reject);
    s.listen(0, "127.0.0.1", () => {
      const address = s.address();
      s.close(() => (typeof address === "object" && address ? resolve(address.port) : reject(new Error("no port"))));
    });
  });
}
