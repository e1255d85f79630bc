// What the OpenAI API adds over calling the runtime directly. A real control plane (its own
// process, one replica), a real agent (its own process) holding deployment "bench" whose runtime is
// the stub OpenAI server (bench/support/stub-openai.ts: a fixed completion, or a stream of chunks
// at a fixed pace; no inference), and this process as the client over HTTP/1.1 keep-alive (undici,
// as the SDKs do): the same stub started alone over plain HTTP is the floor, and the API is reached
// at ${url}/v1/completions over TLS with a service key. Each run measures both, one after the other:
//   - open loop at BENCH_RATE requests/s for BENCH_SECONDS: p50, p95 and p99 of each, each latency
//     counted from when its request was due (bench/support/open-loop.ts); "added" is API minus
//     direct, per percentile;
//   - a rate sweep (BENCH_SWEEP requests/s, BENCH_SWEEP_SECONDS each, stopping at the first miss):
//     the most requests/s at added p99 <= 10 ms with nothing failed;
//   - streams: BENCH_STREAMS streams of BENCH_CHUNKS chunks paced BENCH_PACE_MS apart,
//     BENCH_STREAM_CONCURRENCY at once: tokens/s through the API over tokens/s direct, and the time
//     to the first token, added at p99.
// Beside them, the CPU ms per request of the control plane, the agent and this client in the open
// loop, and of the stub called directly (a bare Node HTTP server answering itself: the anchor the
// relay's figures are read against, as ratios); the same open loop and streams through the relay's
// transport alone (bench/support/relay-floor.ts: the same TLS port, HTTP/2 hop and runtime client,
// none of ModelForge's work), its two processes' CPU per request and per chunk the floor of the
// control plane's and the agent's; the write system calls per request of the control
// plane and the agent (a count: the figure a busy machine does not move); the same per chunk for
// the API's streams; before the runs,
// `openssl speed -seconds 3 rsa2048`'s sign time; the load average per run; and before each run the
// machine's own pauses (bench/support/machine-pauses.ts): a busy core taken away for 5 ms or more
// is a stall no process of the bench can avoid, and one such stall fails a sweep step.
//
//   npx tsx bench/openai.ts    BENCH_RUNS=3 BENCH_RATE=1000 BENCH_SECONDS=5 BENCH_SWEEP=100,250,500,750,1000,1500,2000
//                              BENCH_SWEEP_SECONDS=2 BENCH_STREAMS=160 BENCH_CHUNKS=100 BENCH_PACE_MS=5
//                              BENCH_STREAM_CONCURRENCY=16 BENCH_PAUSE_SECONDS=5
// BENCH_CPU_PROF=<dir> has the control plane and the agent write CPU profiles there, and prints the
// open loop's and the API streams' windows to read them in: npx tsx bench/support/read-profile.ts FILE 40 FROM-TO.
import { spawn } from "node:child_process";
import { once as eventOnce } from "node:events";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { cpus, loadavg, tmpdir } from "node:os";
import { join } from "node:path";
import { createInterface } from "node:readline";
import { fileURLToPath } from "node:url";
import { Agent, request } from "undici";
import { describePauses, machinePauses, type MachinePauses } from "./support/machine-pauses.js";
import { openLoop } from "./support/open-loop.js";
import { ms, numParam, param, processCpuMs, processWrites, rsaSignMs, summarize, type Summary } from "./support/stats.js";
import { startStubDeployment, until } from "./support/stub-deployment.js";
import { serverNodeFlags } from "../server/tuning.js";

const runs = numParam("BENCH_RUNS", 3);
const rate = numParam("BENCH_RATE", 1000);
const seconds = numParam("BENCH_SECONDS", 5);
const sweepRates = param("BENCH_SWEEP", "100,250,500,750,1000,1500,2000").split(",").map(Number);
if (!sweepRates.every((r) => Number.isFinite(r) && r > 0)) throw new Error("BENCH_SWEEP: expected rates per second, comma-separated");
const sweepSeconds = numParam("BENCH_SWEEP_SECONDS", 2);
const streams = numParam("BENCH_STREAMS", 160);
const chunks = numParam("BENCH_CHUNKS", 100);
const paceMs = numParam("BENCH_PACE_MS", 5);
const streamConcurrency = numParam("BENCH_STREAM_CONCURRENCY", 16);
const pauseSeconds = numParam("BENCH_PAUSE_SECONDS", 5);
/** How long the stack is watched doing nothing, for its CPU at rest. */
const idleSeconds = 3;
/** The shortest gap of a spinning core counted as the machine's pause. */
const pauseThresholdMs = 5;
/** The issue's bound on added p99, for the sweep. */
const addedP99Target = 10;

interface Target {
  url: string;
  dispatcher: Agent;
  headers: Record<string, string>;
}

const step = (what: string) => process.stderr.write(`${what}\n`);
const signMs = await rsaSignMs();
const setup = await startStubDeployment(step, ["--pace-ms", String(paceMs)]);
// Keep-alive pools as an SDK keeps them; bounded waits so a stalled path ends the run, not hangs it.
const pool = (ca?: string) =>
  new Agent({ connections: 64, headersTimeout: 30_000, bodyTimeout: 30_000, ...(ca ? { connect: { ca } } : {}) });
const json = { "content-type": "application/json" };
/** TLS connections the client opened to the API: each is a full or resumed handshake on the control plane. */
let apiConnections = 0;
const direct: Target = { url: `${setup.stubOrigin}/v1/completions`, dispatcher: pool(), headers: json };
const api: Target = {
  url: `${setup.info.url}/v1/completions`,
  dispatcher: pool(setup.info.caPem),
  headers: { ...json, authorization: `Bearer ${setup.secret}` },
};
api.dispatcher.on("connect", () => void apiConnections++);

/** The relay's transport alone: its edge (as the control plane's port) and node (as the agent's hops) processes. */
async function startRelayFloor(): Promise<{ target: Target; pids: { edge: number; node: number }; close(): void }> {
  const script = fileURLToPath(new URL("./support/relay-floor.ts", import.meta.url));
  const dir = mkdtempSync(join(tmpdir(), "mf-bench-floor-"));
  const edge = spawn(process.execPath, [...serverNodeFlags, "--import", "tsx", script, "edge", dir], {
    stdio: ["ignore", "pipe", "inherit"],
  });
  const [line] = (await eventOnce(createInterface({ input: edge.stdout! }), "line")) as [string];
  const [url, caFile] = line.split(" ") as [string, string];
  const node = spawn(process.execPath, ["--import", "tsx", script, "node", url, caFile, setup.stubOrigin], { stdio: "inherit" });
  process.on("exit", () => {
    edge.kill();
    node.kill();
  });
  const target = { url: `${url}/v1/completions`, dispatcher: pool(readFileSync(caFile, "utf8")), headers: json };
  // 503 until the node has opened its stream.
  await until(async () => {
    const res = await request(target.url, { method: "POST", headers: json, body: completion, dispatcher: target.dispatcher });
    await res.body.text();
    return res.statusCode === 200 ? true : undefined;
  }, "the relay floor to answer 200");
  const close = () => {
    edge.kill();
    node.kill();
    rmSync(dir, { recursive: true, force: true });
  };
  return { target, pids: { edge: edge.pid!, node: node.pid! }, close };
}
const completion = JSON.stringify({ model: "bench", prompt: "The quick brown fox", max_tokens: 1 });

/** One whole completion; anything but a 200 is a failure. */
const once = (t: Target) => async () => {
  const res = await request(t.url, { method: "POST", headers: t.headers, body: completion, dispatcher: t.dispatcher });
  await res.body.text();
  if (res.statusCode !== 200) throw new Error(`HTTP ${res.statusCode}`);
};

/** One stream: ms to its first chunk and to its end; fails unless every chunk arrived. */
async function oneStream(t: Target): Promise<{ ttft: number; total: number }> {
  const body = JSON.stringify({ model: "bench", prompt: "Count", max_tokens: chunks, stream: true });
  const start = performance.now();
  const res = await request(t.url, { method: "POST", headers: t.headers, body, dispatcher: t.dispatcher });
  let ttft = Number.NaN;
  let text = "";
  for await (const part of res.body as AsyncIterable<Buffer>) {
    if (Number.isNaN(ttft)) ttft = performance.now() - start;
    text += part.toString();
  }
  const total = performance.now() - start;
  const tokens = text.split("\n\n").filter((e) => e.startsWith("data: {")).length;
  if (res.statusCode !== 200 || tokens !== chunks || !text.includes("data: [DONE]"))
    throw new Error(`stream: HTTP ${res.statusCode}, ${tokens} of ${chunks} chunks`);
  return { ttft, total };
}

interface Fixed {
  summary: Summary;
  failed: number;
  firstError: string | undefined;
}

async function fixedRate(t: Target, perSecond: number, forSeconds: number): Promise<Fixed> {
  const r = await openLoop(once(t), perSecond, forSeconds);
  return { summary: summarize(r.latencies), failed: r.failed, firstError: r.firstError };
}

/** The highest rate of the sweep met (added p99 within the target, nothing failed), and each step's figures. */
async function sweep(): Promise<{ most: number; steps: string[] }> {
  let most = 0;
  const steps: string[] = [];
  for (const r of sweepRates) {
    const d = await fixedRate(direct, r, sweepSeconds);
    const a = await fixedRate(api, r, sweepSeconds);
    const added = a.summary.p99 - d.summary.p99;
    const met = added <= addedP99Target && a.failed === 0 && d.failed === 0;
    steps.push(
      `${r}/s added p50 ${ms(a.summary.p50 - d.summary.p50)} p99 ${ms(added)}${a.failed > 0 ? ` (${a.failed} failed: ${a.firstError})` : ""}${met ? "" : " MISS"}`,
    );
    if (!met) break;
    most = r;
  }
  return { most, steps };
}

/** `streams` streams, `streamConcurrency` at once: tokens/s over the whole phase, and each stream's TTFT. */
async function streaming(t: Target): Promise<{ tokensPerSecond: number; ttft: Summary }> {
  const ttfts: number[] = [];
  let next = 0;
  const start = performance.now();
  await Promise.all(
    Array.from({ length: streamConcurrency }, async () => {
      while (next++ < streams) ttfts.push((await oneStream(t)).ttft);
    }),
  );
  return { tokensPerSecond: (streams * chunks * 1000) / (performance.now() - start), ttft: summarize(ttfts) };
}

interface Run {
  direct: Fixed;
  api: Fixed;
  /** CPU ms per request through the API: the control plane's, the agent's, this client's. */
  cpu: number[];
  /** Write system calls per request through the API: the control plane's, the agent's. */
  writes: number[];
  /** Per chunk of the API's streams: CPU ms of the control plane and the agent, then their write calls. */
  perChunk: number[];
  /** The stub's own CPU ms when called directly: per request, and per chunk of its streams. */
  stub: { perRequest: number; perChunk: number };
  /** CPU ms per second of the control plane and the agent with no request in flight (their loops). */
  idle: number[];
  /** The relay's transport alone, per request and per chunk: CPU ms of its edge and node, then their write calls. */
  floor: { perRequest: number[]; perChunk: number[] };
  most: number;
  steps: string[];
  ratio: number;
  ttftDirect: Summary;
  ttftApi: Summary;
  /** TLS connections opened to the API during the run, after its warm-up. */
  connections: number;
  load: number;
  pauses: MachinePauses;
}

async function oneRun(): Promise<Run> {
  // The floor of the tail: measured with the bench's processes idle, so it is the machine's alone.
  const pauses = await machinePauses(cpus().length, pauseSeconds, pauseThresholdMs);
  // Warm both paths first, unrecorded, at the rate measured: the client's pool grows to the
  // connections that rate keeps busy (at half the rate the first measured second opened dozens
  // more, each a TLS handshake on the control plane), as a long-running client's pool already has.
  await fixedRate(direct, rate, 1);
  await fixedRate(floor.target, rate, 1);
  await fixedRate(api, rate, 1);
  const connectionsBefore = apiConnections;
  // What the two spend with nothing to relay (the database's loops, heartbeats, reports), part of
  // every per-request figure below at its rate.
  const idle0 = [processCpuMs(setup.pids.server), processCpuMs(setup.pids.agent)];
  await new Promise((r) => setTimeout(r, idleSeconds * 1000));
  const idle = [processCpuMs(setup.pids.server), processCpuMs(setup.pids.agent)].map((c, i) => (c - idle0[i]!) / idleSeconds);
  const stub0 = processCpuMs(setup.pids.stub);
  const d = await fixedRate(direct, rate, seconds);
  // The anchor: what a bare Node HTTP server (the stub, plain HTTP) spends answering the same request itself.
  const stubCpu = (processCpuMs(setup.pids.stub) - stub0) / (rate * seconds);
  // What each request through the API costs the control plane and the agent: the load-independent figure.
  const cpuNow = () => [processCpuMs(setup.pids.server), processCpuMs(setup.pids.agent), processCpuMs(process.pid)];
  const writesNow = () => [processWrites(setup.pids.server), processWrites(setup.pids.agent)];
  const [cpu0, writes0] = [cpuNow(), writesNow()];
  const from = monotonicUs();
  const a = await fixedRate(api, rate, seconds);
  const cpu = cpuNow().map((c, i) => (c - cpu0[i]!) / (rate * seconds));
  const writes = writesNow().map((w, i) => (w - writes0[i]!) / (rate * seconds));
  // The window to read the processes' CPU profiles in (bench/support/read-profile.ts).
  if (process.env.BENCH_CPU_PROF) step(`API open loop: monotonic µs ${from}-${monotonicUs()}`);
  const floorCpu = () => [
    processCpuMs(floor.pids.edge),
    processCpuMs(floor.pids.node),
    processWrites(floor.pids.edge),
    processWrites(floor.pids.node),
  ];
  const floor0 = floorCpu();
  const fl = await fixedRate(floor.target, rate, seconds);
  if (fl.failed > 0) throw new Error(`the relay floor failed ${fl.failed} requests: ${fl.firstError}`);
  const floorPerRequest = floorCpu().map((c, i) => (c - floor0[i]!) / (rate * seconds));
  const { most, steps } = await sweep();
  const stubStream0 = processCpuMs(setup.pids.stub);
  const sd = await streaming(direct);
  const stubPerChunk = (processCpuMs(setup.pids.stub) - stubStream0) / (streams * chunks);
  const [streamCpu0, streamWrites0] = [cpuNow(), writesNow()];
  const streamsFrom = monotonicUs();
  const sa = await streaming(api);
  const [streamCpu1, streamWrites1] = [cpuNow(), writesNow()];
  if (process.env.BENCH_CPU_PROF) step(`API streams: monotonic µs ${streamsFrom}-${monotonicUs()}`);
  const delta = (after: number[], before: number[]) => [0, 1].map((i) => (after[i]! - before[i]!) / (streams * chunks));
  const perChunk = [...delta(streamCpu1, streamCpu0), ...delta(streamWrites1, streamWrites0)];
  const floorStream0 = floorCpu();
  await streaming(floor.target);
  const floorStream1 = floorCpu();
  const floorPerChunk = [0, 1, 2, 3].map((i) => (floorStream1[i]! - floorStream0[i]!) / (streams * chunks));
  const ratio = sa.tokensPerSecond / sd.tokensPerSecond;
  return {
    direct: d,
    api: a,
    cpu,
    writes,
    perChunk,
    stub: { perRequest: stubCpu, perChunk: stubPerChunk },
    idle,
    floor: { perRequest: floorPerRequest, perChunk: floorPerChunk },
    most,
    steps,
    ratio,
    ttftDirect: sd.ttft,
    ttftApi: sa.ttft,
    connections: apiConnections - connectionsBefore,
    load: loadavg()[0]!,
    pauses,
  };
}

const monotonicUs = () => process.hrtime.bigint() / 1000n;
const count = (v: number) => v.toFixed(2);
const ms3 = (v: number) => v.toFixed(3);
const ratio = (v: number) => `${v.toFixed(2)}x`;
const pcts = (s: Summary) => `${ms(s.p50)}/${ms(s.p95)}/${ms(s.p99)}`;
const added = (r: Run, p: "p50" | "p95" | "p99") => r.api.summary[p] - r.direct.summary[p];
const spread = (xs: number[], f = ms) => {
  const sorted = [...xs].sort((a, b) => a - b);
  return `${f(sorted[Math.floor((sorted.length - 1) / 2)]!)} (${f(sorted[0]!)}-${f(sorted.at(-1)!)})`;
};

function report(all: Run[], loadBefore: number[]): string {
  const lines = all.map((r, i) =>
    [
      `run ${i + 1}: at ${rate}/s direct p50/p95/p99 ${pcts(r.direct.summary)} ms, API ${pcts(r.api.summary)} ms`,
      `(${r.direct.failed + r.api.failed} failed${r.api.firstError ? `: ${r.api.firstError}` : ""});`,
      `added ${ms(added(r, "p50"))}/${ms(added(r, "p95"))}/${ms(added(r, "p99"))} ms;`,
      `CPU per request: control plane ${ms(r.cpu[0]!)} ms, agent ${ms(r.cpu[1]!)} ms, client ${ms(r.cpu[2]!)} ms, the stub direct ${ms(r.stub.perRequest)} ms;`,
      `writes per request: control plane ${count(r.writes[0]!)}, agent ${count(r.writes[1]!)};`,
      `at rest: control plane ${ms(r.idle[0]!)} ms/s, agent ${ms(r.idle[1]!)} ms/s;`,
      `the relay floor per request: edge ${ms3(r.floor.perRequest[0]!)} ms, node ${ms3(r.floor.perRequest[1]!)} ms, writes ${count(r.floor.perRequest[2]!)} and ${count(r.floor.perRequest[3]!)}; per chunk ${ms3(r.floor.perChunk[0]!)} and ${ms3(r.floor.perChunk[1]!)} ms, writes ${count(r.floor.perChunk[2]!)} and ${count(r.floor.perChunk[3]!)};`,
      `sweep ${r.steps.join(", ")}; streams ${ms(r.ratio)} of direct tokens/s,`,
      `per chunk: CPU control plane ${ms3(r.perChunk[0]!)} ms, agent ${ms3(r.perChunk[1]!)} ms, the stub direct ${ms3(r.stub.perChunk)} ms, writes ${count(r.perChunk[2]!)} and ${count(r.perChunk[3]!)};`,
      `TTFT p99 direct ${ms(r.ttftDirect.p99)} API ${ms(r.ttftApi.p99)} ms; ${r.connections} TLS connections opened after warm-up; load ${r.load.toFixed(1)};`,
      `${describePauses(r.pauses)}`,
    ].join(" "),
  );
  const each = (f: (r: Run) => number, fmt = ms) => spread(all.map(f), fmt);
  return [
    `OpenAI API over a stub runtime: ${all.length} runs; open loop ${rate}/s for ${seconds} s per path; sweep ${sweepRates.join(",")}/s`,
    `(${sweepSeconds} s each); ${streams} streams of ${chunks} chunks ${paceMs} ms apart, ${streamConcurrency} at once`,
    ...lines,
    "",
    `added at ${rate}/s, median (range) of runs: p50 ${each((r) => added(r, "p50"))} ms, p95 ${each((r) => added(r, "p95"))} ms, p99 ${each((r) => added(r, "p99"))} ms (target p99 <= ${addedP99Target})`,
    `direct (the floor) p50 ${each((r) => r.direct.summary.p50)}, p99 ${each((r) => r.direct.summary.p99)} ms`,
    `CPU ms per request through the API: control plane ${each((r) => r.cpu[0]!)}, agent ${each((r) => r.cpu[1]!)}, this client ${each((r) => r.cpu[2]!)}`,
    `CPU at rest (nothing relayed, ${idleSeconds} s): control plane ${each((r) => r.idle[0]!)} ms/s, agent ${each((r) => r.idle[1]!)} ms/s: at ${rate}/s, ${each((r) => r.idle[0]! / rate, ms3)} and ${each((r) => r.idle[1]! / rate, ms3)} ms of each request's figure`,
    `the anchor, a bare Node HTTP server (the stub called directly, plain HTTP) answering itself: CPU ms per request ${each((r) => r.stub.perRequest, ms3)}, per chunk ${each((r) => r.stub.perChunk, ms3)}; control plane over it per request ${each((r) => r.cpu[0]! / r.stub.perRequest, ratio)}, per chunk ${each((r) => r.perChunk[0]! / r.stub.perChunk, ratio)}; agent per request ${each((r) => r.cpu[1]! / r.stub.perRequest, ratio)}, per chunk ${each((r) => r.perChunk[1]! / r.stub.perChunk, ratio)}`,
    `the relay's transport alone (bench/support/relay-floor.ts), CPU ms per request: edge ${each((r) => r.floor.perRequest[0]!, ms3)}, node ${each((r) => r.floor.perRequest[1]!, ms3)}; per chunk: edge ${each((r) => r.floor.perChunk[0]!, ms3)}, node ${each((r) => r.floor.perChunk[1]!, ms3)}; control plane over the edge per request ${each((r) => r.cpu[0]! / r.floor.perRequest[0]!, ratio)}, per chunk ${each((r) => r.perChunk[0]! / r.floor.perChunk[0]!, ratio)}; agent over the node per request ${each((r) => r.cpu[1]! / r.floor.perRequest[1]!, ratio)}, per chunk ${each((r) => r.perChunk[1]! / r.floor.perChunk[1]!, ratio)}`,
    `write system calls per request: control plane ${each((r) => r.writes[0]!, count)}, agent ${each((r) => r.writes[1]!, count)}`,
    `per stream chunk through the API: CPU ms control plane ${each((r) => r.perChunk[0]!, ms3)}, agent ${each((r) => r.perChunk[1]!, ms3)}; writes control plane ${each((r) => r.perChunk[2]!, count)}, agent ${each((r) => r.perChunk[3]!, count)}`,
    `most requests/s at added p99 <= ${addedP99Target} ms: ${each(
      (r) => r.most,
      (v) => (v === 0 ? `under ${sweepRates[0]}` : String(v)),
    )}`,
    `streaming tokens/s, API over direct: ${each(
      (r) => r.ratio,
      (v) => v.toFixed(3),
    )} (target >= 0.98)`,
    `TTFT added at p99: ${each((r) => r.ttftApi.p99 - r.ttftDirect.p99)} ms`,
    `the machine alone, before each run (${pauseSeconds} s, one spinner per core): pauses >= ${pauseThresholdMs} ms, all cores ${each(
      (r) => r.pauses.cores.reduce((n, c) => n + c.pauses, 0),
      String,
    )}, longest ${each((r) => Math.max(...r.pauses.cores.map((c) => c.longestMs)))} ms, on two cores at once ${each((r) => r.pauses.together, String)}`,
    `openssl speed rsa2048 sign: ${ms(signMs)} ms; loadavg before ${loadBefore.map((l) => l.toFixed(2)).join(" ")}, after ${loadavg()
      .map((l) => l.toFixed(2))
      .join(" ")} (${cpus().length} cores)`,
    "",
  ].join("\n");
}

const floor = await startRelayFloor();
const loadBefore = loadavg();
const all: Run[] = [];
for (let run = 1; run <= runs; run++) {
  step(`run ${run}`);
  all.push(await oneRun());
}
process.stdout.write(report(all, loadBefore));
await Promise.all([direct.dispatcher.close(), api.dispatcher.close(), floor.target.dispatcher.close()]);
floor.close();
await setup.close();
