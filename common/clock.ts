// The one source of time for rules that depend on it (liveness, leases, expiry, renewal), injected
// as SPIRE's CA and the Kubernetes node lifecycle controller inject theirs, so tests drive time
// instead of sleeping. The TLS layer keeps using real time: a certificate's validity is not ours
// to fake.

export interface Clock {
  /** Milliseconds since the epoch. */
  now(): number;
  /**
   * Calls `fn` once `ms` of this clock's time has passed, unless the function it returns is called
   * first. A per-request deadline uses this rather than a sleep with a signal: aborting a signal
   * builds and dispatches an Event, which cost a measurable share of a request on the OpenAI API.
   */
  after(ms: number, fn: () => void): () => void;
  /**
   * Resolves after `ms` of this clock's time, or as soon as any signal aborts (it never rejects),
   * so loops that pause between rounds stop promptly on shutdown.
   */
  sleep(ms: number, ...signals: (AbortSignal | undefined)[]): Promise<void>;
}

/** Wall-clock time and real timers. */
export const systemClock: Clock = {
  now: () => Date.now(),
  after: (ms, fn) => {
    const timer = setTimeout(fn, ms);
    return () => clearTimeout(timer);
  },
  sleep: (ms, ...signals) => waitUntil((done) => systemClock.after(ms, done), signals),
};

/** An instant of a clock as ISO 8601 text (UTC, milliseconds), as records on disk keep it. */
export function isoTime(ms: number): string {
  return new Date(ms).toISOString();
}

/** Another clock's time shifted by `offsetMs` (an agent whose clock is wrong, for skew drills). */
export function offsetClock(base: Clock, offsetMs: number): Clock {
  return {
    now: () => base.now() + offsetMs,
    after: (ms, fn) => base.after(ms, fn),
    sleep: (ms, ...signals) => base.sleep(ms, ...signals),
  };
}

/**
 * A clock that moves only when told to, for tests. Sleeps resolve when `advance` passes their
 * deadline, in deadline order.
 */
export class ManualClock implements Clock {
  private current: number;
  private readonly sleepers = new Set<{ at: number; wake(): void }>();
  /** Called whenever a sleep starts: `tick` waits on it for woken loops to go back to sleep. */
  private onSleep: (() => void) | undefined;

  constructor(start = Date.now()) {
    this.current = start;
  }

  now(): number {
    return this.current;
  }

  after(ms: number, fn: () => void): () => void {
    const sleeper = { at: this.current + Math.max(0, ms), wake: fn };
    this.sleepers.add(sleeper);
    this.onSleep?.();
    return () => this.sleepers.delete(sleeper);
  }

  sleep(ms: number, ...signals: (AbortSignal | undefined)[]): Promise<void> {
    return waitUntil((wake) => this.after(ms, wake), signals);
  }

  /** Moves time forward and wakes every sleeper whose deadline has come. */
  advance(ms: number): void {
    if (!(ms >= 0)) throw new RangeError("a clock only moves forward");
    this.current += ms;
    const due = [...this.sleepers].filter((s) => s.at <= this.current).sort((a, b) => a.at - b.at);
    for (const s of due) {
      // One woken before it may have cancelled it (`after`'s promise): skip it then.
      if (this.sleepers.delete(s)) s.wake();
    }
  }

  /** How many sleeps are waiting. */
  get sleeping(): number {
    return this.sleepers.size;
  }

  /**
   * Advances by `ms`, then waits until as many sleeps are waiting as before: every periodic loop
   * it woke has finished its round and gone back to sleep. One tick is one round of each loop
   * that was due, whatever the machine's load.
   */
  async tick(ms: number, timeoutMs = 60_000): Promise<void> {
    const before = this.sleepers.size;
    this.advance(ms);
    if (this.sleepers.size >= before) return;
    await new Promise<void>((resolve, reject) => {
      const timer = setTimeout(() => {
        this.onSleep = undefined;
        reject(new Error(`ManualClock.tick: loops did not go back to sleep within ${timeoutMs} ms`));
      }, timeoutMs);
      this.onSleep = () => {
        if (this.sleepers.size < before) return;
        clearTimeout(timer);
        this.onSleep = undefined;
        resolve();
      };
    });
  }
}

/** Resolves when the armed timer fires or any signal aborts, whichever is first. */
function waitUntil(arm: (done: () => void) => () => void, signals: (AbortSignal | undefined)[]): Promise<void> {
  const live = signals.filter((s): s is AbortSignal => s !== undefined);
  return new Promise((resolve) => {
    if (live.some((s) => s.aborted)) return resolve();
    const done = () => {
      cancel();
      for (const s of live) s.removeEventListener("abort", done);
      resolve();
    };
    const cancel = arm(done);
    for (const s of live) s.addEventListener("abort", done, { once: true });
  });
}
