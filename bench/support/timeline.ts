// A per-second record of this process, kept in the process itself: how much of each second its
// event loop was busy and the CPU it used (all threads, kernel included). A saturated process
// answers the bench's IPC late, so sampling over IPC misses exactly the seconds that matter (the
// first seconds after a restart).
import { performance } from "node:perf_hooks";
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
