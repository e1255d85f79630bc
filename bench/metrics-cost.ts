// What metrics cost on the heartbeat path (issue #15: at most 5%). Two measurements:
//
// 1. In isolation: the counter increment a heartbeat pays (ServerMetrics.sessions.heartbeat())
//    against an empty call, in nanoseconds, over several rounds.
// 2. End to end: bench/heartbeats.ts run PAIRS times with METRICS=0 and METRICS=1 alternately
//    (the endpoint scraped every SCRAPE s through the steady window), comparing the server's CPU
//    per acknowledged heartbeat and the ack latency. Alternating puts both sides under the same
//    drifting load; each run prints the load average it saw, and the spread of every figure is
//    shown, because on a shared machine one run says little.
//
//   npx tsx bench/metrics-cost.ts   (PAIRS=3 AGENTS=1000 RATE=1000 DURATION=20 SCRAPE=5 BENCH_DB=pglite)
import { spawn } from "node:child_process";
import { loadavg } from "node:os";
import { fileURLToPath } from "node:url";
import { ServerMetrics } from "../server/observability/metrics.js";
import { numParam, param } from "./support/stats.js";

const PAIRS = numParam("PAIRS", 3);
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
interface Result {
  heartbeatsPerSecond: number;
  serverCores: number;
  ackP50Ms: number;
  ackP99Ms: number;
  metrics: boolean;
  loadAverage: number[];
}
const runOnce = (on: boolean) =>
  new Promise<Result>((resolve, reject) => {
    const child = spawn(process.execPath, ["--import", "tsx", fileURLToPath(new URL("./heartbeats.ts", import.meta.url))], {
      env: {
        ...process.env,
        AGENTS: String(AGENTS),
        RATE: String(RATE),
        DURATION: String(DURATION),
        METRICS: on ? "1" : "0",
        SCRAPE: String(SCRAPE),
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

const results: Result[] = [];
for (let i = 0; i < PAIRS; i++) {
  for (const on of i % 2 === 0 ? [false, true] : [true, false]) {
    const r = await runOnce(on);
    results.push(r);
    const us = (r.serverCores * 1e6) / r.heartbeatsPerSecond;
    console.log(
      `run ${results.length}: metrics ${on ? "on " : "off"}  ${r.heartbeatsPerSecond} hb/s, server ${us.toFixed(1)} µs CPU per heartbeat, ` +
        `ack p50 ${r.ackP50Ms.toFixed(2)} ms p99 ${r.ackP99Ms.toFixed(1)} ms; load average ${r.loadAverage.map((l) => l.toFixed(1)).join(" ")}`,
    );
  }
}
const side = (on: boolean) => {
  const rs = results.filter((r) => r.metrics === on);
  const sorted = (f: (r: Result) => number) => rs.map(f).sort((a, b) => a - b);
  const median = (v: number[]) => (v.length % 2 ? v[(v.length - 1) / 2]! : (v[v.length / 2 - 1]! + v[v.length / 2]!) / 2);
  const us = sorted((r) => (r.serverCores * 1e6) / r.heartbeatsPerSecond);
  const p99 = sorted((r) => r.ackP99Ms);
  return { us, p99, usMedian: median(us), p99Median: median(p99) };
};
const off = side(false);
const on = side(true);
const range = (v: number[], d: number) => `${v[0]!.toFixed(d)}-${v[v.length - 1]!.toFixed(d)}`;
console.log(
  `\nserver CPU per heartbeat: off median ${off.usMedian.toFixed(1)} µs (${range(off.us, 1)}), on median ${on.usMedian.toFixed(1)} µs (${range(on.us, 1)}): ` +
    `${(((on.usMedian - off.usMedian) / off.usMedian) * 100).toFixed(1)}% (target <= 5%)`,
);
console.log(
  `ack p99: off median ${off.p99Median.toFixed(1)} ms (${range(off.p99, 1)}), on median ${on.p99Median.toFixed(1)} ms (${range(on.p99, 1)})`,
);
console.log(`load average at the end ${load()}`);
