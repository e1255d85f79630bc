// CPU utilisation and load for telemetry. Utilisation is the busy share of all logical CPUs' time
// between two readings of the kernel's cumulative counters (os.cpus(): /proc/stat on Linux), so it
// covers the whole interval between samples rather than one instant; load averages are the
// kernel's own (os.loadavg()).
import { cpus, loadavg } from "node:os";

/** Cumulative CPU time of one logical CPU since boot, in milliseconds, as os.cpus() reports it. */
export interface CpuTimes {
  user: number;
  nice: number;
  sys: number;
  idle: number;
  irq: number;
}

/**
 * Percent of CPU time busy between two readings, over all CPUs; undefined when the readings
 * cannot be compared: a different number of CPUs (hot-plug), a counter that went backwards (a
 * wrapped or reset counter), or no time elapsed. Pure.
 */
export function cpuUtilization(previous: readonly CpuTimes[], current: readonly CpuTimes[]): number | undefined {
  if (previous.length === 0 || previous.length !== current.length) return undefined;
  let busy = 0;
  let total = 0;
  for (let i = 0; i < current.length; i++) {
    const a = previous[i]!;
    const b = current[i]!;
    const deltas = [b.user - a.user, b.nice - a.nice, b.sys - a.sys, b.idle - a.idle, b.irq - a.irq];
    if (deltas.some((d) => d < 0 || !Number.isFinite(d))) return undefined;
    const sum = deltas.reduce((s, d) => s + d, 0);
    total += sum;
    busy += sum - (b.idle - a.idle);
  }
  if (total <= 0) return undefined;
  return Math.min(100, Math.max(0, (busy / total) * 100));
}

/** Remembers the last reading, so that each sample covers the time since the previous one. */
export class CpuSampler {
  private previous: CpuTimes[];

  constructor(private readonly read: () => CpuTimes[] = readCpuTimes) {
    this.previous = read();
  }

  /** Utilisation since the previous call (or since this sampler was made). */
  sample(): number | undefined {
    const current = this.read();
    const utilization = cpuUtilization(this.previous, current);
    this.previous = current;
    return utilization;
  }
}

function readCpuTimes(): CpuTimes[] {
  return cpus().map((c) => c.times);
}

/** The 1, 5 and 15 minute load averages (zeros where the platform has none, as on Windows). */
export function loadAverages(): { loadAverage1m: number; loadAverage5m: number; loadAverage15m: number } {
  const [one = 0, five = 0, fifteen = 0] = loadavg();
  return { loadAverage1m: one, loadAverage5m: five, loadAverage15m: fifteen };
}
