// What metrics cost on the heartbeat path (issue #15: at most 5%). Two measurements:
//
// 1. In isolation: the counter increment a heartbeat pays (ServerMetrics.sessions.heartbeat())
//    against an empty call, in nanoseconds, over several rounds.
// 2. End to end: bench/heartbeats.ts in three modes, ROUNDS times each, interleaved: "off"
//    (METRICS=0), "on" (the endpoint serving, never scraped: what the heartbeat path pays) and
//    "scraped" (scraped every SCRAPE s through the steady window: the heartbeat path plus what
//    scrapes cost, a fixed amount per scrape whatever the heartbeat rate). Compared: the server's
//    CPU per acknowledged heartbeat and the ack latency. Interleaving puts every mode under the
//    same drifting load; each run prints the load average it saw, and the spread of every figure
//    is shown, because on a shared machine one run says little.
//
//   npx tsx bench/metrics-cost.ts   (ROUNDS=2 AGENTS=1000 RATE=1000 DURATION=20 SCRAPE=5 BENCH_DB=pglite)
import { spawn } from "node:child_process";
import { loadavg } from "node:os";
import { fileURLToPath } from "node:url";
import { ServerMetrics } from "../server/observability/metrics.js";
import { numParam, param } from "./support/stats.js";

const ROUNDS = numParam("ROUNDS", 2);
const AGENTS = numParam("AGENTS", 1000);
const RATE = numParam("RATE", 1000);
const DURATION = numParam("DURATION", 20);
const SCRAPE = numParam("SCRAPE", 5);
const load = () =>
  loadavg()
    .map((l) => l.toFixed(1))
    .join(" ");

// 1. In isolation.
const metrics = new ServerMetrics();
const heartbeat = metrics.sessions.heartbeat;
const empty = (): void => undefined;
const N = 2_000_000;
const timeLoop = (f: () => void) => {
  const t = process.hrtime.bigint();
  for (let i = 0; i < N; i++) f();
  return Number(process.hrtime.bigint() - t) / N;
};
const rounds: { counter: number; floor: number }[] = [];
for (let r = 0; r < 7; r++) rounds.push({ floor: timeLoop(empty), counter: timeLoop(heartbeat) });
const extra = rounds.map((r) => r.counter - r.floor).sort((a, b) => a - b);
console.log(
  `counter increment per heartbeat: median ${extra[3]!.toFixed(1)} ns over an empty call (rounds: ${extra.map((e) => e.toFixed(1)).join(", ")} ns; ` +
    `empty call ${rounds.map((r) => r.floor.toFixed(1)).join(", ")} ns); load average ${load()}`,
);

// 2. End to end.
type Mode = "off" | "on" | "scraped";
const modes: Mode[] = ["off", "on", "scraped"];
interface Result {
  heartbeatsPerSecond: number;
  serverCores: number;
  ackP50Ms: number;
  ackP99Ms: number;
  loadAverage: number[];
}
const runOnce = (mode: Mode) =>
  new Promise<Result>((resolve, reject) => {
    const child = spawn(process.execPath, ["--import", "tsx", fileURLToPath(new URL("./heartbeats.ts", import.meta.url))], {
      env: {
        ...process.env,
        AGENTS: String(AGENTS),
        RATE: String(RATE),
        DURATION: String(DURATION),
        METRICS: mode === "off" ? "0" : "1",
        SCRAPE: mode === "scraped" ? String(SCRAPE) : "0",
        BENCH_DB: param("BENCH_DB", "pglite"),
      },
      stdio: ["ignore", "pipe", "inherit"],
    });
    let out = "";
    child.stdout.on("data", (c: Buffer) => (out += c.toString()));
    child.on("exit", (code) => {
      const line = out.split("\n").find((l) => l.startsWith("RESULT "));
      if (code !== 0 || line === undefined) return reject(new Error(`heartbeats.ts exited ${code}:\n${out.slice(-2000)}`));
      resolve(JSON.parse(line.slice("RESULT ".length)) as Result);
    });
  });

const usPerHeartbeat = (r: Result) => (r.serverCores * 1e6) / r.heartbeatsPerSecond;
const results = new Map<Mode, Result[]>(modes.map((m) => [m, []]));
let n = 0;
for (let round = 0; round < ROUNDS; round++) {
  // Each round starts with a different mode, so no mode always runs first or last.
  for (let i = 0; i < modes.length; i++) {
    const mode = modes[(round + i) % modes.length]!;
    const r = await runOnce(mode);
    results.get(mode)!.push(r);
    console.log(
      `run ${++n}: ${mode.padEnd(7)} ${r.heartbeatsPerSecond} hb/s, server ${usPerHeartbeat(r).toFixed(1)} µs CPU per heartbeat, ` +
        `ack p50 ${r.ackP50Ms.toFixed(2)} ms p99 ${r.ackP99Ms.toFixed(1)} ms; load average ${r.loadAverage.map((l) => l.toFixed(1)).join(" ")}`,
    );
  }
}
const median = (v: number[]) => {
  const s = [...v].sort((a, b) => a - b);
  return s.length % 2 ? s[(s.length - 1) / 2]! : (s[s.length / 2 - 1]! + s[s.length / 2]!) / 2;
};
const spread = (v: number[], d: number) => `${Math.min(...v).toFixed(d)}-${Math.max(...v).toFixed(d)}`;
const off = median(results.get("off")!.map(usPerHeartbeat));
console.log("");
for (const mode of modes) {
  const us = results.get(mode)!.map(usPerHeartbeat);
  const p99 = results.get(mode)!.map((r) => r.ackP99Ms);
  const vsOff = mode === "off" ? "" : `, ${(((median(us) - off) / off) * 100).toFixed(1)}% over off (target <= 5%)`;
  console.log(
    `${mode.padEnd(7)} server CPU per heartbeat median ${median(us).toFixed(1)} µs (${spread(us, 1)})${vsOff}; ack p99 median ${median(p99).toFixed(1)} ms (${spread(p99, 1)})`,
  );
}
console.log(`load average at the end ${load()}`);
