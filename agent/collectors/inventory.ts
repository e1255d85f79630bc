// The node's inventory: host facts plus the GPUs, and a fingerprint to send it only on change.

import { createHash } from "node:crypto";
import { create } from "@bufbuild/protobuf";
import { GpuInfoSchema, type GpuInfo, type HostInfo } from "../../gen/proto/modelforge/common/v1/common_pb.js";
import { collectHostInfo } from "./host.js";
import {
  NVIDIA_SMI_INVENTORY_ARGS,
  NvidiaSmiParseError,
  parseNvidiaSmiInventory,
  runNvidiaSmi,
  truncate,
  type NvidiaSmiInventoryRow,
  type RunNvidiaSmiOptions,
} from "./nvidia-smi.js";

export {
  NvidiaSmiParseError,
  parseNvidiaSmiInventory,
  type NvidiaSmiInventoryRow,
} from "./nvidia-smi.js";

export const NVIDIA_VENDOR = "NVIDIA";

export interface Inventory {
  host: HostInfo;
  gpus: GpuInfo[];
  /** False when GPU collection failed; `gpus` then holds only what could be read. */
  gpuCollectionComplete: boolean;
  /** Why GPU collection was incomplete; "" when it was complete. */
  gpuCollectionError: string;
}

export interface CollectOptions {
  /** Kill nvidia-smi after this many milliseconds. Default 10 000. */
  nvidiaSmiTimeoutMs?: number;
}

export interface GpuCollection {
  gpus: GpuInfo[];
  complete: boolean;
  error: string;
}

export async function collectInventory(options: CollectOptions = {}): Promise<Inventory> {
  const [host, gpu] = await Promise.all([collectHostInfo(), collectNvidiaGpus(options)]);
  return {
    host,
    gpus: gpu.gpus,
    gpuCollectionComplete: gpu.complete,
    gpuCollectionError: gpu.error,
  };
}

/**
 * The NVIDIA GPUs, via nvidia-smi on PATH.
 * - nvidia-smi not on PATH: no NVIDIA GPUs, complete (a CPU-only node).
 * - non-zero exit, killed, timeout, or a line that does not parse: incomplete, with a short error,
 *   and whatever rows did parse.
 */
export async function collectNvidiaGpus(options: CollectOptions = {}): Promise<GpuCollection> {
  const runOptions: RunNvidiaSmiOptions = {};
  if (options.nvidiaSmiTimeoutMs !== undefined) runOptions.timeoutMs = options.nvidiaSmiTimeoutMs;
  const run = await runNvidiaSmi(NVIDIA_SMI_INVENTORY_ARGS, runOptions);
  switch (run.kind) {
    case "not-found":
      return { gpus: [], complete: true, error: "" };
    case "failed":
      return { gpus: parseLeniently(run.stdout).map(toGpuInfo), complete: false, error: run.error };
    case "ok":
      try {
        return { gpus: parseNvidiaSmiInventory(run.stdout).map(toGpuInfo), complete: true, error: "" };
      } catch (err) {
        if (!(err instanceof NvidiaSmiParseError)) throw err;
        const rows = err.rows as NvidiaSmiInventoryRow[];
        return {
          gpus: rows.map(toGpuInfo),
          complete: false,
          error: truncate(`could not parse ${err.message}`),
        };
      }
  }
}

function parseLeniently(stdout: string): NvidiaSmiInventoryRow[] {
  try {
    return parseNvidiaSmiInventory(stdout);
  } catch (err) {
    if (err instanceof NvidiaSmiParseError) return err.rows as NvidiaSmiInventoryRow[];
    throw err;
  }
}

function toGpuInfo(row: NvidiaSmiInventoryRow): GpuInfo {
  return create(GpuInfoSchema, {
    uuid: row.uuid,
    index: row.index,
    pciBusId: row.pciBusId,
    model: row.name,
    memoryTotalBytes: row.memoryTotalBytes,
    driverVersion: row.driverVersion,
    vendor: NVIDIA_VENDOR,
  });
}

/** What inventoryFingerprint reads; an Inventory or an InventoryReport both fit. */
export interface FingerprintInput {
  host?: HostInfo | undefined;
  gpus: readonly GpuInfo[];
  gpuCollectionComplete: boolean;
  gpuCollectionError: string;
}

/**
 * A stable hash (hex SHA-256) of an inventory's meaningful content: the host facts, the disks by
 * mount point (mount, file system, size; never usage), the GPUs sorted by uuid, and the
 * completeness flag and error. Field order, disk order and GPU order do not matter. Equal
 * fingerprints mean there is nothing new to report.
 */
export function inventoryFingerprint(inv: FingerprintInput): string {
  const h = inv.host;
  const byKey =
    <T>(key: (t: T) => string) =>
    (a: T, b: T) =>
      key(a) < key(b) ? -1 : key(a) > key(b) ? 1 : 0;
  const canonical = {
    v: 1,
    host: h
      ? {
          hostname: h.hostname,
          osName: h.osName,
          osVersion: h.osVersion,
          kernel: h.kernel,
          architecture: h.architecture,
          cpuModel: h.cpuModel,
          cpuCores: h.cpuCores,
          memoryTotalBytes: h.memoryTotalBytes.toString(),
          disks: h.disks
            .map((d) => [d.mount, d.filesystem, d.sizeBytes.toString()] as const)
            .sort(byKey((d) => `${d[0]}\0${d[1]}\0${d[2]}`)),
        }
      : null,
    gpus: inv.gpus
      .map((g) => [g.uuid, g.index, g.pciBusId, g.model, g.memoryTotalBytes.toString(), g.driverVersion, g.vendor] as const)
      .sort(byKey((g) => `${g[0]}\0${JSON.stringify(g)}`)),
    gpuCollectionComplete: inv.gpuCollectionComplete,
    gpuCollectionError: inv.gpuCollectionError,
  };
  return createHash("sha256").update(JSON.stringify(canonical)).digest("hex");
}
