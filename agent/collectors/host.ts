// Host facts and usage from systeminformation (mounts from ./mounts.ts), with node:os fallbacks.
//
// systeminformation resolves with placeholder values ("unknown", 0, []) rather than rejecting when
// it cannot read something; we still guard against rejections so one failing probe cannot fail a
// whole inventory or telemetry sample.

import os from "node:os";
import si from "systeminformation";
import { readFsUsage, type FsUsage } from "./mounts.js";
import { create } from "@bufbuild/protobuf";
import {
  DiskSchema,
  HostInfoSchema,
  MountUsageSchema,
  type Disk,
  type HostInfo,
  type MountUsage,
} from "../../gen/proto/modelforge/common/v1/common_pb.js";

/** A non-negative integer number of bytes as a uint64; anything else becomes 0. */
export function toUint64(value: number | undefined | null): bigint {
  if (value === undefined || value === null || !Number.isFinite(value) || value <= 0) return 0n;
  return BigInt(Math.trunc(value));
}

async function orFallback<T>(probe: () => Promise<T>, fallback: () => T): Promise<T> {
  try {
    return await probe();
  } catch {
    return fallback();
  }
}

/** systeminformation's "I don't know" spelling. */
function known(value: string | undefined | null): string {
  const v = (value ?? "").trim();
  return v === "unknown" ? "" : v;
}

type OsFacts = Awaited<ReturnType<typeof si.osInfo>>;
type CpuFacts = Awaited<ReturnType<typeof si.cpu>>;

/**
 * The OS's and the CPU's facts, read once per process (again only after a failed read):
 * systeminformation reads them with execSync (hostname -f, lscpu, ...), which held the agent's
 * event loop 50-85 ms a call, and the inventory is collected at every telemetry round to see
 * whether it changed, so every relayed request in flight waited behind it (bench/openai.ts: the
 * added p99). They change with a reboot or an upgrade, which restarts the agent; the hostname is
 * read live.
 */
let staticFacts: Promise<[OsFacts | undefined, CpuFacts | undefined]> | undefined;

function readStaticFacts(): Promise<[OsFacts | undefined, CpuFacts | undefined]> {
  const reading = Promise.all([
    orFallback(
      () => si.osInfo(),
      () => undefined,
    ),
    orFallback(
      () => si.cpu(),
      () => undefined,
    ),
  ]);
  staticFacts = reading.then((facts) => {
    if (facts.includes(undefined)) staticFacts = undefined;
    return facts;
  });
  return staticFacts;
}

export async function collectHostInfo(): Promise<HostInfo> {
  const [[osData, cpuData], memData, fsData] = await Promise.all([
    staticFacts ?? readStaticFacts(),
    orFallback(
      () => si.mem(),
      () => undefined,
    ),
    readFsUsage(),
  ]);
  return create(HostInfoSchema, {
    hostname: os.hostname() || known(osData?.hostname),
    osName: known(osData?.distro),
    osVersion: known(osData?.release),
    kernel: known(osData?.kernel) || os.release(),
    architecture: known(osData?.arch) || os.arch(),
    cpuModel: cpuModel(cpuData),
    cpuCores: cpuData?.cores || os.availableParallelism(),
    memoryTotalBytes: toUint64(memData?.total || os.totalmem()),
    disks: disksOf(fsData),
  });
}

/**
 * systeminformation splits the kernel's model name into `manufacturer` ("AMD", "Intel") and
 * `brand` with the first word removed ("EPYC", "Xeon® Gold 6338"); put them back together.
 */
function cpuModel(cpu: { manufacturer: string; brand: string } | undefined): string {
  const manufacturer = known(cpu?.manufacturer);
  const brand = known(cpu?.brand);
  const joined = brand.toLowerCase().startsWith(manufacturer.toLowerCase()) ? brand : `${manufacturer} ${brand}`.trim();
  return joined || (os.cpus()[0]?.model.trim() ?? "");
}

/** One entry per mount point, sorted by mount point. */
function byMount(entries: readonly FsUsage[]): FsUsage[] {
  const seen = new Map<string, FsUsage>();
  for (const e of entries) {
    if (e.mount && !seen.has(e.mount)) seen.set(e.mount, e);
  }
  return [...seen.values()].sort((a, b) => (a.mount < b.mount ? -1 : a.mount > b.mount ? 1 : 0));
}

function disksOf(entries: readonly FsUsage[]): Disk[] {
  return byMount(entries).map((e) => create(DiskSchema, { mount: e.mount, filesystem: e.type, sizeBytes: toUint64(e.size) }));
}

export interface MemoryUsage {
  usedBytes: bigint;
  totalBytes: bigint;
}

/** Memory in use counts page cache and buffers as free: used = total - available. */
export async function collectMemoryUsage(): Promise<MemoryUsage> {
  const mem = await orFallback(
    () => si.mem(),
    () => undefined,
  );
  const total = mem?.total || os.totalmem();
  const available = mem ? mem.available : os.freemem();
  return { usedBytes: toUint64(total - available), totalBytes: toUint64(total) };
}

export async function collectMountUsage(): Promise<MountUsage[]> {
  return byMount(await readFsUsage()).map((e) =>
    create(MountUsageSchema, {
      mount: e.mount,
      sizeBytes: toUint64(e.size),
      usedBytes: toUint64(e.used),
    }),
  );
}
