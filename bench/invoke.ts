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
import { cpus, loadavg } from "node:os";
import { createClient } from "@connectrpc/connect";
import { DeploymentService } from "../gen/proto/modelforge/deployment/v1/deployment_pb.js";
import { Health } from "../gen/proto/grpc/health/v1/health_pb.js";
import { ms, summarize, type Summary } from "./support/stats.js";
import { header, startStubDeployment } from "./support/stub-deployment.js";

const num = (name: string, fallback: number) => Number(process.env[name] ?? fallback);
const runs = num("BENCH_RUNS", 3);
const sequential = num("BENCH_SEQUENTIAL", 1000);
const seconds = num("BENCH_SECONDS", 3);
const concurrency = num("BENCH_CONCURRENCY", 64);

const step = (what: string) => process.stderr.write(`${what}\n`);
const loadBefore = loadavg();
const setup = await startStubDeployment(step);
const { server, secret, transport } = setup;
const service = createClient(DeploymentService, transport([header("authorization", `Bearer ${secret}`)]));
const health = createClient(Health, transport());
const stubUrl = `${setup.stubOrigin}/v1/completions`;

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
    `loadavg before: ${loadBefore.map((l) => l.toFixed(2)).join(" ")}; after: ${loadAfter.map((l) => l.toFixed(2)).join(" ")} (${cpus().length} cores)`,
    "",
  ].join("\n"),
);

await setup.close();
