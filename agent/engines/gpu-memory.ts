// GPU memory of a runtime, from nvidia-smi's compute processes: the sum over every process in the
// runtime's process group (an external server's workers hold the GPU, not always its leader),
// sampled while the runtime works; the peak of the samples is the evidence. Without nvidia-smi
// (no NVIDIA GPU or driver) there is nothing to sample and the evidence stays 0.
import type { Clock } from "../../common/clock.js";
import {
  NVIDIA_SMI_COMPUTE_APPS_ARGS,
  NvidiaSmiParseError,
  parseNvidiaSmiComputeApps,
  runNvidiaSmi,
  type NvidiaSmiComputeApp,
  type RunNvidiaSmiOptions,
} from "../collectors/nvidia-smi.js";
import { readStat } from "./proc.js";

/** Pure: the bytes the processes of group `pgrp` use, given each listed pid's group. */
export function groupGpuBytes(apps: readonly NvidiaSmiComputeApp[], pgrp: number, groupOf: ReadonlyMap<number, number>): bigint {
  let sum = 0n;
  for (const app of apps) if (groupOf.get(app.pid) === pgrp) sum += app.usedMemoryBytes;
  return sum;
}

/** One sample: the group's GPU bytes; "none" when nvidia-smi is absent; undefined when it failed. */
export async function sampleGroupGpuMemory(pgrp: number, options: RunNvidiaSmiOptions = {}): Promise<bigint | "none" | undefined> {
  const run = await runNvidiaSmi(NVIDIA_SMI_COMPUTE_APPS_ARGS, options);
  if (run.kind === "not-found") return "none";
  let apps: NvidiaSmiComputeApp[];
  try {
    apps = parseNvidiaSmiComputeApps(run.stdout);
  } catch (err) {
    // Rows that parsed still count (a failed run keeps its complete lines too).
    if (!(err instanceof NvidiaSmiParseError)) throw err;
    apps = err.rows as NvidiaSmiComputeApp[];
  }
  if (run.kind === "failed" && apps.length === 0) return undefined;
  const groupOf = new Map<number, number>();
  for (const pid of new Set(apps.map((a) => a.pid))) {
    const stat = await readStat(pid);
    if (stat !== undefined) groupOf.set(pid, stat.pgrp);
  }
  return groupGpuBytes(apps, pgrp, groupOf);
}

/** Samples a runtime's GPU memory every `intervalMs` until stopped; keeps the peak. */
export class GpuMemorySampler {
  private peak = 0n;
  private absent = false;
  private readonly done = new AbortController();
  private readonly loop: Promise<void>;

  constructor(
    private readonly pgrp: number,
    private readonly clock: Clock,
    private readonly intervalMs: number,
    private readonly options: RunNvidiaSmiOptions = {},
  ) {
    this.loop = this.run();
  }

  private async sample(): Promise<boolean> {
    const bytes = await sampleGroupGpuMemory(this.pgrp, this.options);
    if (bytes === "none") {
      this.absent = true;
      return false;
    }
    if (bytes !== undefined && bytes > this.peak) this.peak = bytes;
    return true;
  }

  private async run(): Promise<void> {
    while (!this.done.signal.aborted) {
      if (!(await this.sample())) return;
      await this.clock.sleep(this.intervalMs, this.done.signal);
    }
  }

  private stopped: Promise<bigint> | undefined;

  /** Takes a last sample and returns the peak in bytes (0 without a GPU); once. */
  stop(): Promise<bigint> {
    this.stopped ??= this.finish();
    return this.stopped;
  }

  private async finish(): Promise<bigint> {
    this.done.abort();
    await this.loop;
    if (!this.absent) await this.sample();
    return this.peak;
  }
}
