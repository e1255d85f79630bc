// The built-in engine's tokens per second against llama.cpp's own llama-server, on the same
// generated GGUF (about 26M parameters, 99 MiB of f32, so decoding is bound by memory, not by the
// HTTP around it) and the same threads:
// - aggregate completion tokens/s at 1, 4, 8 and 16 concurrent requests (`/v1/completions`,
//   max_tokens 48, a different prompt each), through the OpenAI API of a control plane and agent
//   ("api"), at the runtime as the agent's supervisor starts it ("runtime"), and at a llama-server
//   started by hand with the same parallel, context and threads ("llama-server");
// - the time of a request sharing a 1,500-token prefix with the one before it, against one
//   sharing nothing (warm / cold).
// llama-server is the anchor: every figure is printed as a ratio to it, from the same rounds (the
// three run at once and take turns). It is the engine's own binary unless LLAMA_SERVER names
// another, such as a native build of the same source (git clone
// node_modules/node-llama-cpp/llama/gitRelease.bundle llama.cpp && cmake -S llama.cpp -B
// llama.cpp/build -DCMAKE_BUILD_TYPE=Release && cmake --build llama.cpp/build --target
// llama-server -j: about 7 minutes on 2 cores).
//   [LLAMA_SERVER=/path/to/llama-server] npx tsx bench/engine.ts
//   (BENCH_RUNS=3, THREADS=2, PARALLEL=16, CONTEXT=2048, MAX_TOKENS=48, CONCURRENCY=1,4,8,16,
//    TARGETS=llama-server,runtime,api)
import { spawn, type ChildProcess } from "node:child_process";
import { once } from "node:events";
import { existsSync, mkdtempSync, rmSync } from "node:fs";
import { loadavg, tmpdir } from "node:os";
import { join } from "node:path";
import { benchShape, writeTinyLlamaGguf } from "../scripts/gguf.js";
import { startApiStack, type ApiStack } from "./support/engine-stack.js";
import { llamaServerPath, Supervisor } from "../agent/engines/supervisor.js";

const runs = Number(process.env.BENCH_RUNS ?? 3);
const threads = Number(process.env.THREADS ?? 2);
const parallel = Number(process.env.PARALLEL ?? 16);
const context = Number(process.env.CONTEXT ?? 2048);
const maxTokens = Number(process.env.MAX_TOKENS ?? 48);
const concurrencies = (process.env.CONCURRENCY ?? "1,4,8,16").split(",").map(Number);
const targets = (process.env.TARGETS ?? "llama-server,runtime,api").split(",");
// The anchor: LLAMA_SERVER (e.g. a native build of the same source), else the engine's own binary.
const llamaServer = process.env.LLAMA_SERVER ?? llamaServerPath;

interface Target {
  name: string;
  url: string;
  /** Headers every request carries (the API's service key). */
  headers: Record<string, string>;
  /** The model field a request names. */
  model: string | undefined;
  stop(): Promise<void>;
}

const dir = mkdtempSync(join(tmpdir(), "mf-bench-engine-"));
const modelPath = join(dir, "model.gguf");

async function waitHealthy(url: string, child: ChildProcess): Promise<void> {
  const deadline = Date.now() + 120_000;
  while (Date.now() < deadline) {
    if (child.exitCode !== null) throw new Error(`exited with ${child.exitCode}`);
    const ok = await fetch(`${url}/health`).then(
      (r) => r.ok,
      () => false,
    );
    if (ok) return;
    await new Promise((r) => setTimeout(r, 200));
  }
  throw new Error(`${url} not healthy within 120 s`);
}

const stopChild = async (child: ChildProcess) => {
  if (child.exitCode !== null) return;
  child.kill("SIGTERM");
  await once(child, "exit");
};

async function startLlamaServer(): Promise<Target> {
  if (!existsSync(llamaServer)) throw new Error(`no llama-server at ${llamaServer} (see the header)`);
  const port = 18_000 + Math.floor(Math.random() * 1000);
  const child = spawn(
    llamaServer,
    [
      "-m",
      modelPath,
      "-t",
      String(threads),
      "-tb",
      String(threads),
      "--parallel",
      String(parallel),
      "-c",
      String(context * parallel),
      "--host",
      "127.0.0.1",
      "--port",
      String(port),
      "-ngl",
      "0",
      "--no-webui",
    ],
    { stdio: ["ignore", "ignore", "ignore"] },
  );
  const url = `http://127.0.0.1:${port}`;
  await waitHealthy(url, child);
  return { name: "llama-server", url, headers: {}, model: undefined, stop: () => stopChild(child) };
}

/** The runtime as the agent starts it: the supervisor's llama-server, with the profile's parameters. */
async function startRuntime(): Promise<Target> {
  const supervisor = new Supervisor({ registryPath: join(dir, "runtimes.json") });
  const runtime = await supervisor.start("llama.cpp", { modelPath, params: { contextSize: context, threads, parallel } });
  return { name: "runtime", url: runtime.baseUrl, headers: {}, model: undefined, stop: () => supervisor.stopAll() };
}

async function startApi(): Promise<Target> {
  const stack: ApiStack = await startApiStack({ modelPath, threads, parallel, context });
  return { name: "api", url: stack.url, headers: stack.headers, model: "bench", stop: () => stack.stop() };
}

/** One completion; its completion tokens. */
async function complete(t: Target, prompt: string, tokens: number): Promise<number> {
  const res = await fetch(`${t.url}/v1/completions`, {
    method: "POST",
    headers: { "content-type": "application/json", ...t.headers },
    body: JSON.stringify({ ...(t.model ? { model: t.model } : {}), prompt, max_tokens: tokens, temperature: 0 }),
  });
  if (!res.ok) throw new Error(`${t.name}: ${res.status} ${await res.text()}`);
  const body = (await res.json()) as { usage: { completion_tokens: number } };
  return body.usage.completion_tokens;
}

/** Aggregate completion tokens/s of `concurrency` clients, each sending requests one after another. */
async function throughput(t: Target, concurrency: number, round: number): Promise<number> {
  const perClient = Math.max(2, Math.ceil(16 / concurrency));
  const started = performance.now();
  const counts = await Promise.all(
    Array.from({ length: concurrency }, async (_, c) => {
      let sum = 0;
      for (let i = 0; i < perClient; i++) sum += await complete(t, `Hello ${round} ${c} ${i}`, maxTokens);
      return sum;
    }),
  );
  return (counts.reduce((a, b) => a + b, 0) * 1000) / (performance.now() - started);
}

/** A request sharing a 1,500-token prefix with the one before it, and one sharing nothing: ms each. */
async function prefixReuse(t: Target, round: number): Promise<{ warm: number; cold: number }> {
  const prefix = (seed: string) =>
    Array.from({ length: 300 }, (_, i) => `${seed}${i % 10}x`)
      .join(" ")
      .slice(0, 1500);
  const timed = async (prompt: string) => {
    const started = performance.now();
    await complete(t, prompt, 4);
    return performance.now() - started;
  };
  const shared = prefix(`w${round}`);
  await timed(`${shared} first`);
  const warm = await timed(`${shared} second`);
  const cold = await timed(`${prefix(`c${round}`)} other`);
  return { warm, cold };
}

const spread = (values: number[], digits = 1) => {
  const s = [...values].sort((a, b) => a - b);
  return `${s[Math.floor(s.length / 2)]!.toFixed(digits)} (${s[0]!.toFixed(digits)}-${s.at(-1)!.toFixed(digits)})`;
};
const median = (values: number[]) => [...values].sort((a, b) => a - b)[Math.floor(values.length / 2)]!;

async function main(): Promise<void> {
  await writeTinyLlamaGguf(modelPath, { contextLength: context, shape: benchShape });
  console.log(
    `${runs} runs; threads ${threads}, parallel ${parallel}, context ${context} per sequence, max_tokens ${maxTokens}; load ${loadavg()
      .map((l) => l.toFixed(2))
      .join(" ")}`,
  );
  // Every target runs at once (idle between its turns) and the rounds interleave them, so that a
  // noisy minute of the machine falls on all of them rather than on whichever was measured then.
  const started: Target[] = [];
  const results = new Map<string, { tps: Map<number, number[]>; warm: number[]; cold: number[] }>();
  try {
    for (const name of targets) {
      started.push(name === "llama-server" ? await startLlamaServer() : name === "runtime" ? await startRuntime() : await startApi());
      results.set(name, { tps: new Map(concurrencies.map((c) => [c, []])), warm: [], cold: [] });
    }
    for (const t of started) await throughput(t, 1, -1); // warm up
    for (let round = 0; round < runs; round++) {
      for (const c of concurrencies)
        for (const t of started)
          results
            .get(t.name)!
            .tps.get(c)!
            .push(await throughput(t, c, round));
      for (const t of started) {
        const p = await prefixReuse(t, round);
        results.get(t.name)!.warm.push(p.warm);
        results.get(t.name)!.cold.push(p.cold);
      }
    }
  } finally {
    for (const t of started) await t.stop();
  }
  for (const [name, r] of results) {
    console.log(
      `${name}: ${concurrencies.map((c) => `${c}: ${spread(r.tps.get(c)!)} tok/s`).join(", ")}; prefix warm ${spread(r.warm)} ms, cold ${spread(r.cold)} ms, warm/cold ${spread(
        r.warm.map((w, i) => w / r.cold[i]!),
        3,
      )}`,
    );
  }
  const anchor = results.get("llama-server");
  if (anchor === undefined) return;
  for (const [name, r] of results) {
    if (name === "llama-server") continue;
    const ratios = concurrencies.map((c) => `${c}: ${(median(r.tps.get(c)!) / median(anchor.tps.get(c)!)).toFixed(2)}`);
    console.log(`${name} / llama-server tokens/s (medians): ${ratios.join(", ")}`);
  }
  console.log(
    `load after: ${loadavg()
      .map((l) => l.toFixed(2))
      .join(" ")}`,
  );
}

main()
  .catch((err: unknown) => {
    console.error(err);
    process.exitCode = 1;
  })
  .finally(() => rmSync(dir, { recursive: true, force: true }));
