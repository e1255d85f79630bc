// A per-second record of this process, kept in the process itself: how much of each second its
// event loop was busy and the CPU it used (all threads, kernel included). A saturated process
// answers the bench's IPC late, so sampling over IPC misses exactly the seconds that matter (the
// first seconds after a restart).
import { constants, PerformanceObserver, performance } from "node:perf_hooks";
import { coresUsed } from "./stats.js";

export interface Second {
  /** Wall-clock end of the second, ms since the epoch. */
  at: number;
  /** Share of the second the event loop was not waiting for I/O. */
  busy: number;
  /** CPU used in the second, in cores. */
  cores: number;
}

export function recordSeconds(keep = 3600): { since(fromMs: number): Second[] } {
  const seconds: Second[] = [];
  let elu = performance.eventLoopUtilization();
  let cpu = process.cpuUsage();
  let last = performance.now();
  setInterval(() => {
    const nowElu = performance.eventLoopUtilization();
    const nowCpu = process.cpuUsage();
    const now = performance.now();
    seconds.push({
      at: Date.now(),
      busy: performance.eventLoopUtilization(nowElu, elu).utilization,
      cores: coresUsed(cpu, nowCpu, now - last),
    });
    if (seconds.length > keep) seconds.shift();
    elu = nowElu;
    cpu = nowCpu;
    last = now;
  }, 1000).unref();
  return { since: (fromMs) => seconds.filter((s) => s.at >= fromMs) };
}

export interface Stall {
  /** Wall-clock start of the stall, ms since the epoch. */
  at: number;
  /** How much later than due a 5 ms tick ran. */
  ms: number;
  /** Garbage collection pauses (ms) that began within the stall: minor (scavenge), major (mark-compact). */
  gc: { minor: number; major: number };
  /**
   * CPU the process used over the stall, as a share of one core (all its threads): near 1, its
   * own work held the loop; far below it, the machine did not run it (another process had the core).
   */
  cpuShare: number;
}

/**
 * The moments this process's event loop was held for `thresholdMs` or more, with their times and
 * the garbage collection inside them: a tick every 5 ms that notes how late it ran, and V8's own
 * record of each collection. Set beside another process's slow answers, it tells whose stall they
 * were, and whether the collector's.
 */
export function recordStalls(thresholdMs = 20, keep = 10_000): { since(fromMs: number): Stall[] } {
  const stalls: Stall[] = [];
  const pauses: { start: number; ms: number; major: boolean }[] = [];
  new PerformanceObserver((list) => {
    for (const e of list.getEntries()) {
      const kind = (e as PerformanceEntry & { detail?: { kind?: number } }).detail?.kind;
      pauses.push({ start: e.startTime, ms: e.duration, major: kind === constants.NODE_PERFORMANCE_GC_MAJOR });
      if (pauses.length > 1000) pauses.shift();
    }
  }).observe({ entryTypes: ["gc"] });
  const tickMs = 5;
  let last = performance.now();
  // process.cpuUsage() is one getrusage call: 2.7 µs here (10,000 in a loop), 1 ms a second at
  // this tick. The 0.4-0.7 s in 15 s a CPU profile of a starved process charges to it cannot be
  // its own work: most likely the wait for a core after the call returns.
  let cpu = process.cpuUsage();
  setInterval(() => {
    const now = performance.now();
    const nowCpu = process.cpuUsage();
    const late = now - last - tickMs;
    if (late >= thresholdMs) {
      const gc = { minor: 0, major: 0 };
      for (const p of pauses) if (p.start >= last && p.start < now) gc[p.major ? "major" : "minor"] += p.ms;
      const cpuMs = (nowCpu.user - cpu.user + nowCpu.system - cpu.system) / 1000;
      stalls.push({ at: performance.timeOrigin + last + tickMs, ms: late, gc, cpuShare: cpuMs / (now - last) });
      if (stalls.length > keep) stalls.shift();
    }
    last = now;
    cpu = nowCpu;
  }, tickMs).unref();
  return { since: (fromMs) => stalls.filter((s) => s.at >= fromMs) };
}
