// The agent's periodic work (heartbeats, telemetry, inventory) on a steady, jittered cadence.
// setInterval re-arms from when its callback ran: a late run moves every later one (an agent
// heartbeats less often than asked), and timers that ran late together stay together for good
// (agents that share an event loop, or that started together, send in bursts). Jitter as
// Kubernetes' kubelet has for its node status (wait.JitterUntil), here either side of the interval
// so the mean stays the server's. bench/heartbeats.ts prints how evenly the agents send (the share
// of sends in the busiest tenth of 10 ms slices) and how many were sent: on setInterval, fewer and
// burstier (what is left on the grid is the load generator's own stalls: thousands of agents share
// each of its loops). Cadences one stall held are spread out again by ./timing.ts nextRunAt: in the
// bench, load-generator loops held for a second or more during the ramp had left each worker's
// heartbeats bunched in a fraction of every second.
import { nextRunAt } from "./timing.js";

/** How far each run may fall either side of its interval, as a fraction of it. */
export const cadenceJitter = 0.05;

export interface CadenceTimers {
  now(): number;
  setTimeout(run: () => void, ms: number): unknown;
  clearTimeout(handle: unknown): void;
}

const realTimers: CadenceTimers = {
  now: () => performance.now(),
  setTimeout: (run, ms) => setTimeout(run, ms),
  clearTimeout: (handle) => clearTimeout(handle as NodeJS.Timeout),
};

/**
 * Runs `task` about every `intervalMs` (the first about one interval from now) until the returned
 * function is called. With `overlap: false` a run is skipped while the last one's promise is
 * unsettled: a report that takes longer than its interval on a loaded machine does not pile up
 * collections behind it (a heartbeat, cheap and with its own deadline, keeps the default).
 */
export function repeat(
  intervalMs: number,
  task: () => unknown,
  {
    timers = realTimers,
    jitter = cadenceJitter,
    random = Math.random,
    overlap = true,
  }: { timers?: CadenceTimers; jitter?: number; random?: () => number; overlap?: boolean } = {},
): () => void {
  let dueAt = nextRunAt(timers.now(), timers.now(), intervalMs, jitter, random);
  let handle: unknown;
  let stopped = false;
  let running = false;
  const arm = () => {
    handle = timers.setTimeout(run, Math.max(0, dueAt - timers.now()));
  };
  const run = () => {
    if (stopped) return;
    dueAt = nextRunAt(dueAt, timers.now(), intervalMs, jitter, random);
    arm();
    if (running) return;
    const result = task();
    if (!overlap && result instanceof Promise) {
      running = true;
      const settled = () => {
        running = false;
      };
      result.then(settled, settled);
    }
  };
  arm();
  return () => {
    stopped = true;
    timers.clearTimeout(handle);
  };
}
