// Start-up time of the built control plane (`node dist/server/main.mjs`, what `npm start` runs) on
// the embedded database: from spawn to the first GetServerInfo answer (port open) and to a SERVING
// health check (database ready), on a first start (new data directory) and a warm start (a restart
// of it), five of each. The floor is plain `node -e 0` measured in the same run; the standalone
// agent's start (load and run `status`) is measured beside it; BENCH_TSX=1 adds the same starts from
// source through tsx, for comparison. Prints the load average, since the figures move with
// whatever else the machine is doing.
// Targets (issue 14): warm <= 1.5 s, first <= 4 s to SERVING.
import { execFileSync, spawn } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { loadavg, tmpdir } from "node:os";
import { join } from "node:path";
import { postJson } from "../test/support/http.js";
import { repoRoot } from "../test/support/process.js";

const runs = Number(process.env.BENCH_RUNS ?? 5);
const serverEntry = join(repoRoot, "dist/server/main.mjs");
const agentEntry = join(repoRoot, "dist/agent/modelforge-agent.mjs");

interface Start {
  infoMs: number;
  servingMs: number;
  /** The server's own "database ready" figure: opening the database, migrations included. */
  databaseMs: number;
  /** Copying the build's database template (first starts only), overlapped with loading modules. */
  seedMs: number;
}

async function measure(dir: string, args = [serverEntry]): Promise<Start> {
  const started = performance.now();
  const child = spawn(process.execPath, args, {
    cwd: repoRoot,
    env: {
      PATH: process.env.PATH ?? "",
      HOME: process.env.HOME ?? "/tmp",
      MODELFORGE_LISTEN_ADDRESS: "127.0.0.1",
      MODELFORGE_PORT: "0",
      MODELFORGE_DATA_DIR: join(dir, "data"),
      MODELFORGE_CERTS_DIR: join(dir, "certs"),
    },
    stdio: ["ignore", "pipe", "inherit"],
  });
  const exited = new Promise<void>((resolve) => child.on("close", () => resolve()));
  let out = "";
  const url = await new Promise<string>((resolve, reject) => {
    child.stdout.on("data", (c: Buffer) => {
      out += c.toString();
      const m = /"url":"(https:\/\/[^"]+)"[^\n]*"msg":"control plane serving"/.exec(out);
      if (m) resolve(m[1]!);
    });
    void exited.then(() => reject(new Error(`server exited before serving: ${out}`)));
  });
  const ca = readFileSync(join(dir, "certs", "ca.crt"), "utf8");
  await postJson(`${url}/modelforge.agent.v1.AgentService/GetServerInfo`, ca, {});
  const infoMs = performance.now() - started;
  for (;;) {
    const res = await postJson(`${url}/grpc.health.v1.Health/Check`, ca, { service: "" });
    if ((res.body as { status?: string }).status === "SERVING") break;
    await new Promise((r) => setTimeout(r, 5));
  }
  const servingMs = performance.now() - started;
  child.kill("SIGTERM");
  await exited;
  const figure = (msg: string) => Number(new RegExp(`"ms":(\\d+)[^\\n]*"msg":"${msg}"`).exec(out)?.[1] ?? Number.NaN);
  return { infoMs, servingMs, databaseMs: figure("database ready"), seedMs: figure("embedded database created from the build's template") };
}

function timeProcess(args: string[]): number {
  const started = performance.now();
  try {
    execFileSync(process.execPath, args, { stdio: "ignore", cwd: tmpdir() });
  } catch {
    // `status` without state exits 1; the time is what counts.
  }
  return performance.now() - started;
}

const spread = (values: number[]) => {
  const sorted = values.filter((v) => !Number.isNaN(v)).sort((a, b) => a - b);
  if (sorted.length === 0) return "-";
  const at = (q: number) => Math.round(sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))]!);
  return `median ${at(0.5)} ms (min ${Math.round(sorted[0]!)}, max ${Math.round(sorted[sorted.length - 1]!)}; ${values.map(Math.round).join(", ")})`;
};

execFileSync(process.execPath, [join(repoRoot, "scripts/build.mjs"), "--if-stale"], { stdio: "inherit" });
const loadBefore = loadavg();
const floor = Array.from({ length: runs }, () => timeProcess(["-e", "0"]));
const agent = Array.from({ length: runs }, () => timeProcess([agentEntry, "status", "--state", join(tmpdir(), "mf-bench-no-state.json")]));
const first: Start[] = [];
const warm: Start[] = [];
for (let i = 0; i < runs; i++) {
  const dir = mkdtempSync(join(tmpdir(), "mf-bench-startup-"));
  try {
    first.push(await measure(dir));
    warm.push(await measure(dir));
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}
// BENCH_TSX=1: the same starts from source through tsx (what `npm start` ran before the build).
const tsxFirst: Start[] = [];
const tsxWarm: Start[] = [];
for (let i = 0; process.env.BENCH_TSX === "1" && i < runs; i++) {
  const dir = mkdtempSync(join(tmpdir(), "mf-bench-startup-tsx-"));
  try {
    tsxFirst.push(await measure(dir, ["--import", "tsx", "server/main.ts"]));
    tsxWarm.push(await measure(dir, ["--import", "tsx", "server/main.ts"]));
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}
const loadAfter = loadavg();

console.log(`built control plane, embedded database (PGlite), ${runs} runs each`);
console.log(`load average before ${loadBefore.map((l) => l.toFixed(2)).join(" ")}, after ${loadAfter.map((l) => l.toFixed(2)).join(" ")}`);
console.log(`floor (node -e 0):                ${spread(floor)}`);
console.log(`agent bundle (status, to exit):   ${spread(agent)}`);
for (const [name, starts, target] of [
  ["first start", first, 4000],
  ["warm start", warm, 1500],
  ...(tsxFirst.length > 0
    ? ([
        ["tsx first start", tsxFirst, 4000],
        ["tsx warm start", tsxWarm, 1500],
      ] as const)
    : []),
] as const) {
  console.log(`${name}: GetServerInfo ${spread(starts.map((s) => s.infoMs))}`);
  console.log(`${name}: SERVING       ${spread(starts.map((s) => s.servingMs))} (target ${target} ms)`);
  console.log(`${name}: database open ${spread(starts.map((s) => s.databaseMs))} (the server's own figure)`);
}
console.log(`first start: template copy ${spread(first.map((s) => s.seedMs))} (overlapped with loading modules)`);
