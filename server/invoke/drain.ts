// The invokes in flight on this replica, for a graceful stop: once the drain begins, new work is
// refused (so callers and the other replicas go elsewhere) while the work already admitted is
// counted down to zero; only then do the node sessions it runs over close (server/app.ts). Every
// entry point that relays work to a runtime goes through the relay (./relay.ts), which takes it:
// Invoke, InvokeStream and the OpenAI API (whose front door answers the refusal as 503).
import { Code, ConnectError } from "@connectrpc/connect";
import type { Clock } from "../../common/clock.js";

export class Drain {
  private count = 0;
  private stopping = false;
  private readonly idleWaiters: (() => void)[] = [];
  private readonly beginListeners: (() => void)[] = [];

  /** Work admitted and not yet released. */
  get inFlight(): number {
    return this.count;
  }

  /** Whether the drain has begun: new work is refused. */
  get draining(): boolean {
    return this.stopping;
  }

  /** Admits one unit of work; the release it returns may be called more than once. Throws `unavailable` once draining. */
  enter(): () => void {
    if (this.stopping) throw drainingError();
    this.count++;
    let released = false;
    return () => {
      if (released) return;
      released = true;
      this.count--;
      if (this.count === 0) this.wakeIdle();
    };
  }

  /** Called once when the drain begins: for work that would only wait (requests held for a cold start), to end it now. */
  onBegin(listener: () => void): void {
    this.beginListeners.push(listener);
  }

  /** Refuses new work from now on; resolves once the work in flight is done. */
  begin(): Promise<void> {
    if (!this.stopping) for (const listener of this.beginListeners.splice(0)) listener();
    this.stopping = true;
    if (this.count === 0) return Promise.resolve();
    return new Promise((resolve) => this.idleWaiters.push(resolve));
  }

  private wakeIdle(): void {
    for (const wake of this.idleWaiters.splice(0)) wake();
  }
}

/** What a caller of a draining replica is told: retryable, and elsewhere. */
function drainingError(): ConnectError {
  return new ConnectError("this control plane is shutting down: retry on another replica", Code.Unavailable);
}

/**
 * Begins the drain and waits for the work in flight, for at most `graceMs` of the clock's time;
 * how many were still in flight when the grace ran out (0 when all finished).
 */
export async function drainWithin(drain: Drain, clock: Clock, graceMs: number): Promise<number> {
  const idle = new AbortController();
  void drain.begin().then(() => idle.abort());
  // The sleep ends early, its timer cleared, once the work in flight is done.
  await clock.sleep(graceMs, idle.signal);
  return drain.inFlight;
}
