// Admission for session opens. Opening a session is several database round trips (authorize the
// credential, read cursors, record Hello, reconcile leases); when a fleet reconnects at once (a
// control-plane restart) thousands arrive together, and unbounded they would queue inside the
// database pool until acquisitions time out, failing sessions and starving the heartbeat flush and
// the reconcilers. At most `limit` opens run at a time, in arrival order; past `maxWaiting`
// waiters a new one is refused at once with `unavailable` and a `retry-after` of about how long
// the queue ahead takes to drain at the rate opens are finishing. Without it an agent retries
// from its smallest backoff into a queue that is still full, and each futile try costs the
// server a TLS handshake and a stream while it is busiest.
import { Code, ConnectError } from "@connectrpc/connect";

/** Completions remembered for the drain rate. */
const rateWindow = 32;
/** Completions older than this say nothing about the rate now. */
const rateMaxAgeMs = 5_000;
/** The longest wait asked for: the agent's Welcome deadline is 30 s. */
const maxRetryAfterSeconds = 30;

/**
 * Whole seconds until `waiting` queued opens have drained, at the rate of the `finished` times
 * (ms, any order) no older than `rateMaxAgeMs`; 1 when too few have finished lately to say.
 */
export function drainSeconds(waiting: number, finished: readonly number[], now: number): number {
  const recent = finished.filter((t) => now - t <= rateMaxAgeMs);
  if (recent.length < 2) return 1;
  const span = Math.max(1, Math.max(...recent) - Math.min(...recent));
  const perMs = (recent.length - 1) / span;
  return Math.min(maxRetryAfterSeconds, Math.max(1, Math.ceil(waiting / perMs / 1000)));
}

export class Admission {
  private active = 0;
  private readonly waiting: (() => void)[] = [];
  private readonly finished: number[] = [];
  private nextFinished = 0;

  constructor(
    readonly limit: number,
    readonly maxWaiting: number,
    private readonly now: () => number = () => performance.now(),
  ) {}

  /** Runs `task` when a slot is free; refuses when too many are already waiting. */
  async run<T>(task: () => Promise<T>): Promise<T> {
    if (this.active < this.limit) this.active++;
    else if (this.waiting.length >= this.maxWaiting) {
      const seconds = drainSeconds(this.waiting.length, this.finished, this.now());
      throw new ConnectError(`control plane busy: too many sessions opening at once; retry in ${seconds} s`, Code.Unavailable, {
        "retry-after": String(seconds),
      });
    } else await new Promise<void>((resolve) => this.waiting.push(resolve));
    try {
      return await task();
    } finally {
      this.finished[this.nextFinished] = this.now();
      this.nextFinished = (this.nextFinished + 1) % rateWindow;
      // The slot passes straight to the next waiter, so no newcomer can overtake the queue.
      const next = this.waiting.shift();
      if (next !== undefined) next();
      else this.active--;
    }
  }

  get running(): number {
    return this.active;
  }
  get queued(): number {
    return this.waiting.length;
  }
}
