// Admission for session opens. Opening a session is several database round trips (authorize the
// credential, read cursors, record Hello, reconcile leases); when a fleet reconnects at once (a
// control-plane restart) thousands arrive together, and unbounded they would queue inside the
// database pool until acquisitions time out, failing sessions and starving the heartbeat flush and
// the reconcilers. At most `limit` opens run at a time, in arrival order; past `maxWaiting`
// waiters a new one is refused at once with `unavailable`, which the agent retries with backoff.
import { Code, ConnectError } from "@connectrpc/connect";

export class Admission {
  private active = 0;
  private readonly waiting: (() => void)[] = [];

  constructor(
    readonly limit: number,
    readonly maxWaiting: number,
  ) {}

  /** Runs `task` when a slot is free; refuses when too many are already waiting. */
  async run<T>(task: () => Promise<T>): Promise<T> {
    if (this.active < this.limit) this.active++;
    else if (this.waiting.length >= this.maxWaiting) {
      throw new ConnectError("control plane busy: too many sessions opening at once; retry later", Code.Unavailable);
    } else await new Promise<void>((resolve) => this.waiting.push(resolve));
    try {
      return await task();
    } finally {
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
