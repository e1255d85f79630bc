// What a cold start adds beyond the engine's own load: a request to a deployment at zero replicas,
// through the OpenAI API, against llama-server started bare on the same model.
//
// For each model (the tiny GGUF, and one about ten times its size), a control plane and a real
// agent (bench/support/engine-stack.ts) serve deployment "bench" with autoscaling: min 0, max 1,
// scale to zero after 1 s. Each round:
//   floor   llama-server spawned bare (its announced port, /health), one /v1/completions of
//           max_tokens 1, killed: the engine's load and first answer alone;
//   cold    the deployment waited to zero (unloaded), then the same request through the API:
//           held, a replica placed, acquired (already on disk), loaded, answered. From the
//           request to its answer.
//   added   cold - floor.
// The two alternate, N rounds each; prints every round, the spread (min, median, max) and the
// load average.
//
// Then the scale-up reaction: the tiny model autoscaled from 1 to 4 replicas on the one node
// (target 1 in flight, upscale delay 2 s, window 1 s), four callers start at once, each keeping a
// request in flight; from their start until 4 replicas are READY (routable), against the bound
// upscale delay + the new replicas' load (the longest LOADING to READY among them) + 2 s; beside
// it, llama-server's load bare on idle cores (spawn to healthy) in the same round.
// The callers stop and the deployment is let back to 1 between rounds.
//
// Then goodput under a ramp: an open loop whose rate climbs from 1 to 10 requests/s over 20 s
// (/v1/completions, max_tokens 64, each with a 5 s deadline), against the bench model (26M
// parameters) autoscaled from 1 to 4 replicas (as above) and against one fixed replica; the share of requests answered
// within their deadline, each stack started afresh, alternating, N rounds each.
//
//   npx tsx bench/elastic.ts [rounds=5]   (DEBUG_TIMELINE=1: the deployment events of each round too;
//                                          ONLY_REACTION=1: from the scale-up reaction on;
//                                          ONLY_GOODPUT=1: the goodput alone)
import { mkdtempSync, rmSync } from "node:fs";
import { loadavg, tmpdir } from "node:os";
import { join } from "node:path";
import { DeploymentState } from "../gen/proto/modelforge/deployment/v1/deployment_pb.js";
import { benchShape, writeTinyLlamaGguf, type ModelShape } from "../scripts/gguf.js";
import { startApiStack, type ApiStack } from "./support/engine-stack.js";
import { sleep } from "./support/stats.js";
import { startBareLlama } from "./support/bare-llama.js";

const rounds = Math.max(3, Number(process.argv[2] ?? 5));
const context = 1024;
/** About ten times the tiny model's bytes (the tiny one: embedding 64, 2 blocks). */
const largerShape: ModelShape = { embedding: 144, blocks: 4, heads: 4, feedForward: 400 };
const body = JSON.stringify({ model: "bench", prompt: "The quick brown fox", max_tokens: 1, temperature: 0 });

/** llama-server alone: spawned, healthy, one answer, killed; spawn to answer in ms. */
async function floor(modelPath: string): Promise<number> {
  const t0 = performance.now();
  const llama = await startBareLlama(modelPath, context);
  while (
    (await fetch(`${llama.base}/health`)
      .then((r) => r.status)
      .catch(() => 0)) !== 200
  )
    await sleep(10);
  const res = await fetch(`${llama.base}/v1/completions`, { method: "POST", headers: { "content-type": "application/json" }, body });
  await res.text();
  const took = performance.now() - t0;
  await llama.stop();
  return took;
}

const spread = (values: number[]) => {
  const s = [...values].sort((a, b) => a - b);
  const f = (v: number) => (v / 1000).toFixed(2);
  return `${f(s[Math.floor(s.length / 2)]!)} s (${f(s[0]!)}-${f(s.at(-1)!)})`;
};

async function measure(label: string, shape: ModelShape | undefined): Promise<void> {
  const dir = mkdtempSync(join(tmpdir(), "mf-bench-elastic-"));
  const modelPath = join(dir, "model.gguf");
  await writeTinyLlamaGguf(modelPath, { contextLength: context, ...(shape !== undefined ? { shape } : {}) });
  const stack = await startApiStack({
    modelPath,
    threads: 1,
    parallel: 1,
    context,
    autoscaling: { minReplicas: 0, maxReplicas: 1, scaleToZeroAfter: { seconds: 3600n, nanos: 0 } },
    serverEnv: { MODELFORGE_AUTOSCALE_INTERVAL: "200ms", MODELFORGE_AUTOSCALE_WINDOW: "1s" },
  });
  await stack.admin.updateDeploymentScaling({
    deployment: "bench",
    autoscaling: { minReplicas: 0, maxReplicas: 1, scaleToZeroAfter: { seconds: 1n, nanos: 0 } },
  });
  const floors: number[] = [];
  const colds: number[] = [];
  const added: number[] = [];
  try {
    for (let round = 0; round < rounds; round++) {
      const f = await floor(modelPath);
      for (;;) {
        const d = (await stack.admin.getDeployment({ deployment: "bench" })).deployment!;
        if (d.desiredReplicas === 0 && d.deployment!.state === DeploymentState.UNLOADED) break;
        await sleep(50);
      }
      const t0 = performance.now();
      const wall0 = Date.now();
      const res = await fetch(`${stack.url}/v1/completions`, {
        method: "POST",
        headers: { ...stack.headers, "content-type": "application/json" },
        body,
      });
      await res.text();
      if (res.status !== 200) throw new Error(`the cold request answered ${res.status}`);
      const c = performance.now() - t0;
      if (process.env.DEBUG_TIMELINE) {
        const g = await stack.admin.getDeployment({ deployment: "bench" });
        const at = (t: { seconds: bigint; nanos: number } | undefined) => Number(t!.seconds) * 1000 + t!.nanos / 1e6 - wall0;
        for (const e of g.events.slice(-4)) console.log(`  ${at(e.time).toFixed(0)} ms: ${e.fromState} -> ${e.toState} ${e.reason}`);
        for (const e of g.scalingEvents.slice(-1))
          console.log(`  ${at(e.time).toFixed(0)} ms: scaled ${e.fromReplicas} -> ${e.toReplicas}`);
      }
      floors.push(f);
      colds.push(c);
      added.push(c - f);
      console.log(
        `${label} round ${round + 1}: floor ${(f / 1000).toFixed(2)} s, cold ${(c / 1000).toFixed(2)} s, added ${((c - f) / 1000).toFixed(2)} s`,
      );
    }
  } finally {
    await stack.stop();
    rmSync(dir, { recursive: true, force: true });
  }
  console.log(`${label}: cold ${spread(colds)}, floor ${spread(floors)}, added ${spread(added)}`);
}

const upscaleDelayMs = 2_000;

/** llama-server alone: spawn to a healthy /health, in ms. */
async function engineLoad(modelPath: string): Promise<number> {
  const t0 = performance.now();
  const llama = await startBareLlama(modelPath, context);
  while (
    (await fetch(`${llama.base}/health`)
      .then((r) => r.status)
      .catch(() => 0)) !== 200
  )
    await sleep(10);
  const took = performance.now() - t0;
  await llama.stop();
  return took;
}

/** The longest LOADING to READY among the replicas placed since `sinceWallMs`: the load time the bound allows. */
async function newReplicasLoad(admin: ApiStack["admin"], sinceWallMs: number): Promise<number> {
  const { events } = await admin.getDeployment({ deployment: "bench" });
  const wall = (t: { seconds: bigint; nanos: number } | undefined) => Number(t!.seconds) * 1000 + t!.nanos / 1e6;
  let longest = 0;
  for (const ready of events.filter((e) => e.toState === DeploymentState.READY && wall(e.time) >= sinceWallMs)) {
    const loading = [...events]
      .reverse()
      .find((e) => e.replica === ready.replica && e.toState === DeploymentState.LOADING && wall(e.time) <= wall(ready.time));
    if (loading !== undefined) longest = Math.max(longest, wall(ready.time) - wall(loading.time));
  }
  return longest;
}

async function reaction(): Promise<void> {
  const dir = mkdtempSync(join(tmpdir(), "mf-bench-elastic-"));
  const modelPath = join(dir, "model.gguf");
  await writeTinyLlamaGguf(modelPath, { contextLength: context });
  const stack = await startApiStack({
    modelPath,
    threads: 1,
    parallel: 1,
    context,
    maxPerNode: 4,
    autoscaling: {
      minReplicas: 1,
      maxReplicas: 4,
      targetInFlight: 1,
      upscaleDelay: { seconds: BigInt(upscaleDelayMs / 1000), nanos: 0 },
      downscaleDelay: { seconds: 1n, nanos: 0 },
    },
    serverEnv: { MODELFORGE_AUTOSCALE_INTERVAL: "200ms", MODELFORGE_AUTOSCALE_WINDOW: "1s" },
  });
  const ready = async () => (await stack.admin.getDeployment({ deployment: "bench" })).deployment!;
  const reactions: number[] = [];
  const bounds: number[] = [];
  try {
    for (let round = 0; round < rounds; round++) {
      while ((await ready()).readyReplicas !== 1 || (await ready()).desiredReplicas !== 1) await sleep(100);
      const load = await engineLoad(modelPath);
      let stop = false;
      let failed = 0;
      const caller = async () => {
        while (!stop) {
          const res = await fetch(`${stack.url}/v1/completions`, {
            method: "POST",
            headers: { ...stack.headers, "content-type": "application/json" },
            body: JSON.stringify({ model: "bench", prompt: "The quick brown fox", max_tokens: 32, temperature: 0 }),
          });
          await res.text();
          if (res.status !== 200) failed++;
        }
      };
      const t0 = performance.now();
      const callers = [caller(), caller(), caller(), caller()];
      while ((await ready()).readyReplicas < 4) await sleep(50);
      const took = performance.now() - t0;
      if (process.env.DEBUG_TIMELINE) {
        const g = await stack.admin.getDeployment({ deployment: "bench" });
        const wallStart = Date.now() - took;
        const at = (t: { seconds: bigint; nanos: number } | undefined) => Number(t!.seconds) * 1000 + t!.nanos / 1e6 - wallStart;
        for (const e of g.scalingEvents.slice(-3))
          console.log(`  ${at(e.time).toFixed(0)} ms: ${e.fromReplicas} -> ${e.toReplicas} ${e.reason}`);
        for (const e of g.events.slice(-12))
          console.log(`  ${at(e.time).toFixed(0)} ms: slot ${e.replica} ${e.fromState} -> ${e.toState} ${e.reason}`);
      }
      stop = true;
      await Promise.all(callers);
      const replicasLoad = await newReplicasLoad(stack.admin, Date.now() - took);
      const bound = upscaleDelayMs + replicasLoad + 2_000;
      reactions.push(took);
      bounds.push(bound);
      console.log(
        `reaction round ${round + 1}: 4 ready ${(took / 1000).toFixed(2)} s after the load began; bound ${(bound / 1000).toFixed(2)} s ` +
          `(the new replicas' load ${(replicasLoad / 1000).toFixed(2)} s; the engine bare on idle cores ${(load / 1000).toFixed(2)} s); ${failed} failed`,
      );
    }
  } finally {
    await stack.stop();
    rmSync(dir, { recursive: true, force: true });
  }
  const ratios = reactions.map((r, i) => r / bounds[i]!).sort((a, b) => a - b);
  const ratio = `${ratios[Math.floor(ratios.length / 2)]!.toFixed(2)} (${ratios[0]!.toFixed(2)}-${ratios.at(-1)!.toFixed(2)})`;
  console.log(`reaction: ${spread(reactions)}, bound ${spread(bounds)}, reaction / bound ${ratio}`);
}

const rampMs = 20_000;
const deadlineMs = 5_000;
/** With the bench model (26M parameters) one single-threaded replica answers about 1.5 of these a second. */
const rampTokens = 64;
const rampTop = Number(process.env.RAMP_TOP ?? 10);

/** One ramp through the stack: the share of its requests answered (200) within their deadline. */
async function ramp(url: string, headers: Record<string, string>): Promise<{ good: number; sent: number }> {
  const sent: Promise<boolean>[] = [];
  const t0 = performance.now();
  // The rate at t is 1 + (top - 1) t / ramp per second: request k is due when the integral reaches k.
  for (let k = 0; ; k++) {
    const a = (rampTop - 1) / 2 / (rampMs / 1000);
    const due = ((-1 + Math.sqrt(1 + 4 * a * k)) / (2 * a)) * 1000;
    if (due > rampMs) break;
    const wait = t0 + due - performance.now();
    if (wait > 0) await sleep(wait);
    sent.push(
      fetch(`${url}/v1/completions`, {
        method: "POST",
        headers: { ...headers, "content-type": "application/json" },
        body: JSON.stringify({ model: "bench", prompt: "The quick brown fox", max_tokens: rampTokens, temperature: 0 }),
        signal: AbortSignal.timeout(deadlineMs),
      }).then(
        async (res) => {
          await res.text();
          return res.status === 200;
        },
        () => false,
      ),
    );
  }
  const answered = await Promise.all(sent);
  return { good: answered.filter(Boolean).length, sent: answered.length };
}

async function goodput(): Promise<void> {
  const dir = mkdtempSync(join(tmpdir(), "mf-bench-elastic-"));
  const modelPath = join(dir, "model.gguf");
  // The tiny model answers too fast for a ramp on this machine to pass one replica's capacity.
  await writeTinyLlamaGguf(modelPath, { contextLength: context, shape: benchShape });
  const shares: Record<"autoscaled" | "fixed", number[]> = { autoscaled: [], fixed: [] };
  try {
    for (let round = 0; round < rounds; round++) {
      for (const kind of ["autoscaled", "fixed"] as const) {
        const stack = await startApiStack({
          modelPath,
          threads: 1,
          parallel: 1,
          context,
          maxPerNode: 4,
          ...(kind === "autoscaled"
            ? {
                autoscaling: {
                  minReplicas: 1,
                  maxReplicas: 4,
                  targetInFlight: 1,
                  upscaleDelay: { seconds: BigInt(upscaleDelayMs / 1000), nanos: 0 },
                },
                serverEnv: { MODELFORGE_AUTOSCALE_INTERVAL: "200ms", MODELFORGE_AUTOSCALE_WINDOW: "1s" },
              }
            : {}),
        });
        try {
          const { good, sent } = await ramp(stack.url, stack.headers);
          shares[kind].push(good / sent);
          const replicas = (await stack.admin.getDeployment({ deployment: "bench" })).deployment!.readyReplicas;
          console.log(
            `goodput round ${round + 1} ${kind}: ${good} of ${sent} within ${deadlineMs / 1000} s (${((100 * good) / sent).toFixed(1)} %), ${replicas} ready at the end`,
          );
        } finally {
          await stack.stop();
        }
      }
    }
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
  const pct = (v: number[]) => {
    const x = [...v].sort((a, b) => a - b);
    const f = (n: number) => (100 * n).toFixed(1);
    return `${f(x[Math.floor(x.length / 2)]!)} % (${f(x[0]!)}-${f(x.at(-1)!)})`;
  };
  console.log(`goodput: autoscaled ${pct(shares.autoscaled)}, one fixed replica ${pct(shares.fixed)}`);
}

const before = loadavg()[0]!.toFixed(1);
const sizes: string[] = [];
for (const [label, shape] of process.env.ONLY_REACTION
  ? []
  : ([
      ["tiny", undefined],
      ["larger", largerShape],
    ] as const)) {
  const probe = join(mkdtempSync(join(tmpdir(), "mf-bench-size-")), "m.gguf");
  const { size } = await writeTinyLlamaGguf(probe, { contextLength: context, ...(shape !== undefined ? { shape } : {}) });
  sizes.push(`${label} ${(size / 2 ** 20).toFixed(1)} MiB`);
  rmSync(join(probe, ".."), { recursive: true, force: true });
  await measure(label, shape);
}
if (!process.env.ONLY_GOODPUT) await reaction();
await goodput();
console.log(`models: ${sizes.join(", ")}; ${rounds} rounds each; load average ${before} before, ${loadavg()[0]!.toFixed(1)} after`);
