// `forge artifacts push` of a commit of many small files, in files per second (issue 34: target
// >= 200/s on loopback), RUNS runs with their spread, each beside its floor.
//
//   npx tsx bench/push.ts [--count=1000] [--size=1024] [--runs=3]
//   (or COUNT, SIZE, RUNS, LOG_LEVEL in the environment; BENCH_DB=postgres as in bench/enroll.ts)
//
// The server is a real control plane in a child process (bench/support/server-child.ts), so the
// CLI does not share its event loop. Each run writes COUNT files of SIZE random bytes (new content,
// so every file is really sent) and times the CLI's own push command (runCli, in this process:
// what a push costs, without the CLI's start-up). Two floors, measured in the same run: a probe per
// file answered from the index alone (a file already stored), FLOOR_CONCURRENCY at once, which is
// what the earlier protocol of calls per file could reach at best; and the same files written
// durably in this process (write, fsync, rename, FLOOR_CONCURRENCY at once), the disk work the
// store cannot skip however few calls carry the files.
import { createHash, randomBytes } from "node:crypto";
import { mkdirSync, mkdtempSync, openSync, rmSync, writeFileSync } from "node:fs";
import { open, rename } from "node:fs/promises";
import { cpus, loadavg, tmpdir } from "node:os";
import { join } from "node:path";
import { PassThrough } from "node:stream";
import { createClient, type Interceptor } from "@connectrpc/connect";
import { grpcTransport } from "../common/http2-sessions.js";
import { AdminService } from "../gen/proto/modelforge/admin/v1/admin_pb.js";
import { runCli } from "../cli/cli.js";
import { createTestDatabase } from "../test/support/db.js";
import { forkTs, Rpc } from "./support/ipc.js";
import { benchServerEnv } from "./support/server-env.js";
import { numParam, param } from "./support/stats.js";

const COUNT = numParam("COUNT", 1000);
const SIZE = Math.max(1, numParam("SIZE", 1024));
const RUNS = Math.max(1, numParam("RUNS", 3));
const TARGET = 200;
/** As many at once as the store writes blobs of one batch (server/artifacts/store.ts). */
const FLOOR_CONCURRENCY = 16;
const adminKey = "bench-admin-key-0123456789abcdef";

const dir = mkdtempSync(join(tmpdir(), "mf-bench-push-"));
const throwaway = param("BENCH_DB", "pglite") === "postgres" ? await createTestDatabase("postgres") : undefined;
const databaseUrl = throwaway?.databaseUrl ?? process.env.DATABASE_URL;
const logPath = join(dir, "server.log");
const logFd = openSync(logPath, "a");
const child = forkTs(new URL("./support/server-child.ts", import.meta.url), {
  stdio: ["ignore", logFd, logFd, "ipc"],
  env: benchServerEnv(dir, adminKey, { MODELFORGE_LOG_LEVEL: param("LOG_LEVEL", "info"), DATABASE_URL: databaseUrl ?? "" }),
});
const server = new Rpc(child, "server");
const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;

async function push(env: NodeJS.ProcessEnv, source: string, commit: string): Promise<number> {
  let stderr = "";
  const sink = new PassThrough();
  const errors = new PassThrough().on("data", (d: Buffer) => (stderr += d.toString()));
  sink.resume();
  const t0 = performance.now();
  const code = await runCli(["artifacts", "push", source, "--repository", "bench/push", "--commit", commit], {
    stdout: sink,
    stderr: errors,
    stdin: new PassThrough(),
    env,
    signal: new AbortController().signal,
  });
  const seconds = (performance.now() - t0) / 1000;
  if (code !== 0) throw new Error(`the push failed (${code}): ${stderr}`);
  return COUNT / seconds;
}

/** Runs `work` on every index below COUNT, FLOOR_CONCURRENCY at once; answers per second. */
async function ratePerSecond(work: (i: number) => Promise<unknown>): Promise<number> {
  let next = 0;
  const t0 = performance.now();
  await Promise.all(
    Array.from({ length: FLOOR_CONCURRENCY }, async () => {
      for (let i = next++; i < COUNT; i = next++) await work(i);
    }),
  );
  return COUNT / ((performance.now() - t0) / 1000);
}

/** The files written as the store writes a blob: to a new name, fsync, renamed into place. */
async function durableWrites(files: { path: string; content: Buffer }[], into: string): Promise<number> {
  mkdirSync(into);
  return ratePerSecond(async (i) => {
    const f = files[i]!;
    const fh = await open(join(into, `${f.path}.tmp`), "wx", 0o600);
    try {
      await fh.write(f.content);
      await fh.sync();
    } finally {
      await fh.close();
    }
    await rename(join(into, `${f.path}.tmp`), join(into, f.path));
  });
}

try {
  await server.waitFor("ready", 120_000);
  const info = await server.call<{ url: string; caPem: string; database: string }>("info");
  console.log(
    `server ${info.url}, database: ${info.database}, node ${process.version}, cpu ${cpus()[0]?.model} x${cpus().length}, load average ${loadavg()[0]!.toFixed(1)}`,
  );
  const caFile = join(dir, "ca.crt");
  writeFileSync(caFile, info.caPem);
  const env = { MODELFORGE_SERVER: info.url, MODELFORGE_CA_FILE: caFile, MODELFORGE_OPERATOR_API_KEY: adminKey };
  const auth: Interceptor = (next) => (req) => {
    req.header.set("x-modelforge-admin-token", adminKey);
    return next(req);
  };
  const admin = createClient(AdminService, grpcTransport({ baseUrl: info.url, nodeOptions: { ca: info.caPem }, interceptors: [auth] }));

  const rates: number[] = [];
  const floors: number[] = [];
  const disks: number[] = [];
  for (let run = 1; run <= RUNS; run++) {
    const source = join(dir, `run-${run}`);
    mkdirSync(source);
    const files = Array.from({ length: COUNT }, (_, i) => ({ path: `f${String(i).padStart(5, "0")}.bin`, content: randomBytes(SIZE) }));
    for (const f of files) writeFileSync(join(source, f.path), f.content);
    const commit = run.toString(16).padStart(40, "0");
    const rate = await push(env, source, commit);

    // The floors: one probe per stored file, answered from the index; the files written durably.
    const probes = files.map((f) => ({
      repository: "bench/push",
      commit,
      path: f.path,
      sizeBytes: BigInt(SIZE),
      sha256: createHash("sha256").update(f.content).digest("hex"),
      offset: 0n,
    }));
    const floor = await ratePerSecond((i) => admin.uploadArtifactChunk(probes[i]!));
    const disk = await durableWrites(files, join(dir, `disk-${run}`));
    rates.push(rate);
    floors.push(floor);
    disks.push(disk);
    console.log(
      `run ${run}: ${COUNT} files of ${SIZE} B: ${rate.toFixed(0)} files/s; floors: probes of stored files ${floor.toFixed(0)}/s (ratio ${(rate / floor).toFixed(2)}), durable writes ${disk.toFixed(0)}/s (ratio ${(rate / disk).toFixed(2)}); load ${loadavg()[0]!.toFixed(1)}`,
    );
  }
  const perSecond = median(rates);
  console.log(
    `median ${perSecond.toFixed(0)} files/s (range ${Math.min(...rates).toFixed(0)}-${Math.max(...rates).toFixed(0)}), target >= ${TARGET}: ${perSecond >= TARGET ? "met" : "NOT met"}`,
  );
  console.log(
    `RESULT ${JSON.stringify({ bench: "push", runs: RUNS, count: COUNT, sizeBytes: SIZE, perSecond: Math.round(perSecond), perSecondRange: [Math.round(Math.min(...rates)), Math.round(Math.max(...rates))], floorPerSecond: Math.round(median(floors)), ratio: Number((perSecond / median(floors)).toFixed(2)), durableWritesPerSecond: Math.round(median(disks)), diskRatio: Number((perSecond / median(disks)).toFixed(2)), database: info.database })}`,
  );
  await server.call("stop", {}, 30_000).catch(() => undefined);
  await server.exit();
} catch (err) {
  console.error(err);
  console.error(`server log: ${logPath}`);
  child.kill("SIGKILL");
  process.exitCode = 1;
} finally {
  if (process.exitCode !== 1) rmSync(dir, { recursive: true, force: true });
  await throwaway?.cleanup().catch((err: unknown) => console.error(`dropping the throwaway database failed: ${(err as Error).message}`));
}
process.exit();
