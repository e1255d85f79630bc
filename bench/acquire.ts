// artifact.acquire.v1 throughput against the loopback source's raw speed.
//
// A 1 GiB artifact of several files is generated once (random bytes, kept in the system temp
// directory between runs) and served by the loopback HTTP mirror of the tests, in its own process.
// Each round first reads every file from the mirror through the agent's own mirror client and
// discards the bytes (the raw speed; its read buffers recycled, as in an acquisition), then runs the real handler (hash while streaming, write,
// fsync, promote) into a fresh target root. Prints each round, the ratio acquire/raw (target
// >= 0.8), the spread of 5 rounds and the load average; and the CPU each phase cost the client
// (user and system) and the mirror, since on a two-core machine the loopback source competes for
// the same cores: when they are saturated, the ratio tends to the ratio of those CPU totals.
//
// Each round also times writing the same bytes from memory to the target file system with no
// hashing, then fsync (the disk floor): an acquisition must have every byte on disk before it
// promotes, so where the disk takes bytes durably slower than the mirror sends them, no
// acquisition can beat it, and the ratio against min(raw, disk) is printed too. (Without the
// fsync the floor measured the page cache: 2-3x the disk's own speed here.)
//
//   npx tsx bench/acquire.ts            BENCH_ACQUIRE_MIB=1024 BENCH_ACQUIRE_FILES=4 BENCH_ROUNDS=5
//                                       BENCH_ACQUIRE_ROOT=/dev/shm (where target roots are made)
import { spawn } from "node:child_process";
import { createHash, randomBytes } from "node:crypto";
import {
  createReadStream,
  existsSync,
  fsyncSync,
  mkdirSync,
  readFileSync,
  mkdtempSync,
  rmSync,
  statSync,
  writeFileSync,
  openSync,
  writeSync,
  closeSync,
} from "node:fs";
import { loadavg, tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { pino } from "pino";
import { create } from "@bufbuild/protobuf";
import { JobSpecSchema } from "../gen/proto/modelforge/jobs/v1/jobs_pb.js";
import { artifactAcquireHandler } from "../agent/capabilities/artifact-acquire.js";
import { MirrorSource } from "../agent/capabilities/artifact-sources.js";
import { giveBack, slotOf } from "../agent/capabilities/buffer-pool.js";
import { startMirror } from "../test/support/mirror.js";

const MiB = 1024 * 1024;
const totalMiB = Number(process.env.BENCH_ACQUIRE_MIB ?? 1024);
const fileCount = Number(process.env.BENCH_ACQUIRE_FILES ?? 4);
const rounds = Number(process.env.BENCH_ROUNDS ?? 5);
const repository = "bench/model";
const commit = "b".repeat(40);
const rootBase = process.env.BENCH_ACQUIRE_ROOT ?? tmpdir();

interface SourceFile {
  path: string;
  abs: string;
  size: number;
  sha256: string;
}

async function sha256Of(path: string): Promise<string> {
  const hash = createHash("sha256");
  for await (const chunk of createReadStream(path, { highWaterMark: 4 * MiB })) hash.update(chunk as Buffer);
  return hash.digest("hex");
}

/** The artifact's files, generated once; a manifest keeps their digests. */
async function artifact(): Promise<SourceFile[]> {
  const dir = join(tmpdir(), `modelforge-bench-acquire-${totalMiB}m-${fileCount}`);
  const manifest = join(dir, "manifest.json");
  if (existsSync(manifest)) return JSON.parse(await import("node:fs/promises").then((f) => f.readFile(manifest, "utf8"))) as SourceFile[];
  mkdirSync(dir, { recursive: true });
  const files: SourceFile[] = [];
  const per = Math.floor((totalMiB * MiB) / fileCount);
  for (let i = 0; i < fileCount; i++) {
    const abs = join(dir, `model-${String(i + 1).padStart(5, "0")}-of-${String(fileCount).padStart(5, "0")}.safetensors`);
    const fd = openSync(abs, "w");
    const block = randomBytes(4 * MiB);
    for (let written = 0; written < per; written += block.length) {
      block.writeUInt32LE(written ^ i, 0); // no two blocks alike
      writeSync(fd, block, 0, Math.min(block.length, per - written));
    }
    closeSync(fd);
    files.push({ path: abs.slice(dir.length + 1), abs, size: statSync(abs).size, sha256: await sha256Of(abs) });
  }
  writeFileSync(manifest, JSON.stringify(files));
  return files;
}

async function mirrorChild(): Promise<void> {
  const files = JSON.parse(process.env.BENCH_FILES!) as SourceFile[];
  const mirror = await startMirror();
  for (const f of files) mirror.put(repository, commit, f.path, { content: { path: f.abs, size: f.size } });
  process.stdout.write(`${mirror.url}\n`);
}

async function main(): Promise<void> {
  const files = await artifact();
  const total = files.reduce((n, f) => n + f.size, 0);
  const child = spawn(process.execPath, ["--import", "tsx", fileURLToPath(import.meta.url), "mirror"], {
    env: { ...process.env, BENCH_FILES: JSON.stringify(files) },
    stdio: ["ignore", "pipe", "inherit"],
  });
  const url = await new Promise<string>((resolve) => child.stdout.once("data", (d: Buffer) => resolve(d.toString().trim())));
  const source = new MirrorSource({ baseUrl: url });
  const log = pino({ level: "silent" });
  const signal = new AbortController().signal;
  const load0 = loadavg();

  const raw = async () => {
    const t = performance.now();
    for (const f of files) {
      const body = await source.open({ repository, commit, path: f.path, offset: 0, signal });
      // The client's read slots go back to its pool, as the acquisition's do once written: the
      // raw read pays for no fresh memory per MiB.
      for await (const chunk of body.chunks) if (slotOf(chunk) !== undefined) giveBack(chunk.buffer as SharedArrayBuffer);
    }
    return performance.now() - t;
  };
  const acquire = async (n: number) => {
    const root = mkdtempSync(join(rootBase, "mf-bench-root-"));
    const handler = artifactAcquireHandler({ sources: [source], roots: [root], log });
    const spec = create(JobSpecSchema, {
      kind: {
        case: "artifactAcquire",
        value: {
          repository,
          commit,
          targetRoot: root,
          files: files.map((f) => ({ path: f.path, sizeBytes: BigInt(f.size), sha256: f.sha256 })),
        },
      },
    });
    const t = performance.now();
    await handler(spec, { jobId: `bench-${n}`, attempt: 1, signal, progress: async () => ({ cancelRequested: false }) });
    const ms = performance.now() - t;
    rmSync(root, { recursive: true, force: true });
    return ms;
  };

  const disk = async () => {
    const block = randomBytes(4 * MiB);
    const path = join(rootBase, `mf-bench-floor-${process.pid}`);
    const t = performance.now();
    const fd = openSync(path, "w");
    for (let written = 0; written < total; written += block.length) writeSync(fd, block, 0, Math.min(block.length, total - written));
    fsyncSync(fd);
    closeSync(fd);
    const ms = performance.now() - t;
    rmSync(path, { force: true });
    return ms;
  };
  const gibps = (ms: number) => total / MiB / 1024 / (ms / 1000);
  console.log(
    `artifact: ${files.length} files, ${(total / MiB).toFixed(0)} MiB; mirror ${url} in its own process; target roots under ${rootBase}`,
  );
  const ratios: number[] = [];
  const floorRatios: number[] = [];
  const acq: number[] = [];
  const raws: number[] = [];
  // The mirror runs on the same two cores: its CPU is part of what each phase costs the machine.
  const mirrorCpuS = () => {
    const stat = readFileSync(`/proc/${child.pid}/stat`, "utf8");
    const f = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
    return (Number(f[11]) + Number(f[12])) / 100; // utime + stime, in USER_HZ (100 on Linux)
  };
  const cpu = async (work: () => Promise<number>) => {
    const before = process.cpuUsage();
    const mirror0 = mirrorCpuS();
    const ms = await work();
    const used = process.cpuUsage(before);
    return { ms, cpuS: (used.user + used.system) / 1e6, userS: used.user / 1e6, sysS: used.system / 1e6, mirrorS: mirrorCpuS() - mirror0 };
  };
  const cpuRatios: number[] = [];
  const acqCpu: number[] = [];
  const rawCpu: number[] = [];
  for (let i = 1; i <= rounds; i++) {
    const rc = await cpu(raw);
    const d = await disk();
    const ac = await cpu(() => acquire(i));
    const [r, a] = [rc.ms, ac.ms];
    raws.push(gibps(r));
    acq.push(gibps(a));
    ratios.push(r / a);
    floorRatios.push(Math.max(r, d) / a);
    const gib = total / MiB / 1024;
    rawCpu.push(rc.cpuS / gib);
    acqCpu.push(ac.cpuS / gib);
    cpuRatios.push((rc.cpuS + rc.mirrorS) / (ac.cpuS + ac.mirrorS));
    console.log(
      `round ${i}: raw ${gibps(r).toFixed(2)} GiB/s, disk (write + fsync) ${gibps(d).toFixed(2)} GiB/s, acquire ${gibps(a).toFixed(2)} GiB/s (${(a / 1000).toFixed(1)} s); ` +
        `ratio to raw ${(r / a).toFixed(2)}, to min(raw, disk) ${(Math.max(r, d) / a).toFixed(2)}; ` +
        `CPU s (user+sys client, mirror): raw ${rc.userS.toFixed(2)}+${rc.sysS.toFixed(2)}, ${rc.mirrorS.toFixed(2)}; ` +
        `acquire ${ac.userS.toFixed(2)}+${ac.sysS.toFixed(2)}, ${ac.mirrorS.toFixed(2)}; load ${loadavg()[0]!.toFixed(1)}`,
    );
  }
  const spread = (xs: number[]) => `${Math.min(...xs).toFixed(2)}-${Math.max(...xs).toFixed(2)}`;
  const median = (xs: number[]) => [...xs].sort((x, y) => x - y)[Math.floor(xs.length / 2)]!;
  console.log(
    `raw GiB/s ${spread(raws)}; acquire GiB/s ${spread(acq)}; ratio to raw: median ${median(ratios).toFixed(2)} (spread ${spread(ratios)}; target >= 0.8)`,
  );
  console.log(`ratio to min(raw, disk): median ${median(floorRatios).toFixed(2)} (spread ${spread(floorRatios)})`);
  console.log(
    `client CPU s per GiB: raw ${spread(rawCpu)}, acquire ${spread(acqCpu)}; ` +
      `machine CPU ratio raw/acquire (client + mirror, what the ratio tends to when the cores are saturated): median ${median(cpuRatios).toFixed(2)} (spread ${spread(cpuRatios)})`,
  );
  console.log(
    `load average before ${load0.map((l) => l.toFixed(2)).join(" ")}, after ${loadavg()
      .map((l) => l.toFixed(2))
      .join(" ")} (2 cores)`,
  );
  child.kill();
}

if (process.argv[2] === "mirror") void mirrorChild();
else
  void main().catch((err: unknown) => {
    console.error(err);
    process.exit(1);
  });
