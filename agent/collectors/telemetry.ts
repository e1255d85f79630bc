// One telemetry sample: CPU utilisation and load, memory, per-mount storage, per-GPU measurements.

import { create } from "@bufbuild/protobuf";
import { GpuTelemetrySchema, TelemetrySchema, type GpuTelemetry, type Telemetry } from "../../gen/proto/modelforge/common/v1/common_pb.js";
import { collectMemoryUsage, collectMountUsage } from "./host.js";
import { CpuSampler, loadAverages } from "./cpu.js";
import type { CollectOptions } from "./inventory.js";
import {
  NVIDIA_SMI_TELEMETRY_ARGS,
  NvidiaSmiParseError,
  parseNvidiaSmiTelemetry,
  runNvidiaSmi,
  type NvidiaSmiTelemetryRow,
  type RunNvidiaSmiOptions,
} from "./nvidia-smi.js";

export { parseNvidiaSmiTelemetry, type NvidiaSmiTelemetryRow } from "./nvidia-smi.js";

/** The agent's CPU readings: started with the process, so the first sample already covers a while. */
const processCpu = new CpuSampler();

/** Never rejects because of GPUs: when nvidia-smi fails, the sample simply has no GPU entries. */
export async function collectTelemetry(options: CollectOptions = {}, cpu: CpuSampler = processCpu): Promise<Telemetry> {
  const [memory, mounts, gpus] = await Promise.all([
    collectMemoryUsage(),
    collectMountUsage(),
    collectGpuTelemetry(options).catch((): GpuTelemetry[] => []),
  ]);
  const cpuUtilizationPercent = cpu.sample();
  return create(TelemetrySchema, {
    ...(cpuUtilizationPercent !== undefined ? { cpuUtilizationPercent } : {}),
    ...loadAverages(),
    memoryUsedBytes: memory.usedBytes,
    memoryTotalBytes: memory.totalBytes,
    mounts,
    gpus,
  });
}

/**
 * Per-GPU measurements. Failure (not found, non-zero exit, timeout) gives []; if some lines do not
 * parse, the ones that did are kept: telemetry has no completeness flag to honour.
 */
export async function collectGpuTelemetry(options: CollectOptions = {}): Promise<GpuTelemetry[]> {
  const runOptions: RunNvidiaSmiOptions = {};
  if (options.nvidiaSmiTimeoutMs !== undefined) runOptions.timeoutMs = options.nvidiaSmiTimeoutMs;
  const run = await runNvidiaSmi(NVIDIA_SMI_TELEMETRY_ARGS, runOptions);
  if (run.kind !== "ok") return [];
  let rows: NvidiaSmiTelemetryRow[];
  try {
    rows = parseNvidiaSmiTelemetry(run.stdout);
  } catch (err) {
    if (!(err instanceof NvidiaSmiParseError)) throw err;
    rows = err.rows as NvidiaSmiTelemetryRow[];
  }
  return rows.map((r) =>
    create(GpuTelemetrySchema, {
      uuid: r.uuid,
      utilizationPercent: r.utilizationPercent,
      memoryUsedBytes: r.memoryUsedBytes,
      temperatureCelsius: r.temperatureCelsius,
      powerWatts: r.powerWatts,
    }),
  );
}
