// Log lines about refusals (enrollments, TLS handshakes) that anyone can provoke, without letting a
// flood of them fill the log: in each window the first few events get a line of their own, the rest
// are only counted, and the window ends with one summary line (how many, from how many addresses,
// the busiest ones). The rule is pure (the
// caller passes the clock); `FloodLogger` below is the thin part that writes and schedules.
import type { Logger } from "./logger.js";

export interface FloodPolicy {
  /** Events logged one by one per window. */
  firstPerWindow: number;
  windowMs: number;
  /** Addresses counted separately per window; the rest are counted together. */
  maxPeers: number;
  /** Busiest addresses named in the summary. */
  topPeers: number;
}

/** Five lines, then one summary, per ten seconds. */
export const floodPolicy: FloodPolicy = { firstPerWindow: 5, windowMs: 10_000, maxPeers: 1_000, topPeers: 5 };

export interface FloodSummary {
  /** Events counted but not logged in the window. */
  suppressed: number;
  /** Distinct addresses among them (a lower bound when more than `maxPeers`). */
  peers: number;
  /** The busiest addresses and their counts, busiest first. */
  top: { peer: string; count: number }[];
  windowMs: number;
}

export class FloodGate {
  private windowStart: number | undefined;
  private logged = 0;
  private suppressed = 0;
  private readonly counts = new Map<string, number>();

  constructor(private readonly policy: FloodPolicy) {}

  /** When the current window ends (undefined when none is open). */
  get windowEnd(): number | undefined {
    return this.windowStart === undefined ? undefined : this.windowStart + this.policy.windowMs;
  }

  /**
   * Notes an event from `peer`: true if it gets its own line. An event after the window's end
   * starts a new window; call `close` first to get the old one's summary.
   */
  note(peer: string, now: number): boolean {
    if (this.windowStart === undefined || now >= this.windowStart + this.policy.windowMs) {
      this.reset(now);
    }
    if (this.logged < this.policy.firstPerWindow) {
      this.logged++;
      return true;
    }
    this.suppressed++;
    if (this.counts.has(peer) || this.counts.size < this.policy.maxPeers) this.counts.set(peer, (this.counts.get(peer) ?? 0) + 1);
    return false;
  }

  /** Ends the window if it is over at `now`: its summary when events were suppressed. */
  close(now: number): FloodSummary | undefined {
    if (this.windowStart === undefined || now < this.windowStart + this.policy.windowMs) return undefined;
    const summary: FloodSummary | undefined =
      this.suppressed === 0
        ? undefined
        : {
            suppressed: this.suppressed,
            peers: this.counts.size,
            top: [...this.counts]
              .sort((a, b) => b[1] - a[1])
              .slice(0, this.policy.topPeers)
              .map(([peer, count]) => ({ peer, count })),
            windowMs: this.policy.windowMs,
          };
    this.windowStart = undefined;
    return summary;
  }

  private reset(now: number): void {
    this.windowStart = now;
    this.logged = 0;
    this.suppressed = 0;
    this.counts.clear();
  }
}

/** Writes through a FloodGate: individual warn lines, then one summary line per window. */
export class FloodLogger {
  private readonly gate: FloodGate;
  private timer: NodeJS.Timeout | undefined;

  constructor(
    private readonly log: Logger,
    private readonly what: string,
    policy: FloodPolicy,
    private readonly clock: () => number = () => performance.now(),
  ) {
    this.gate = new FloodGate(policy);
  }

  warn(peer: string, fields: Record<string, unknown>): void {
    const now = this.clock();
    this.flush(now);
    if (this.gate.note(peer, now)) {
      this.log.warn({ peer, ...fields }, this.what);
      return;
    }
    if (this.timer === undefined) {
      const end = this.gate.windowEnd ?? now;
      this.timer = setTimeout(
        () => {
          this.timer = undefined;
          this.flush(Math.max(this.clock(), end)); // a timer may fire a hair early
        },
        Math.max(0, end - now),
      );
      this.timer.unref(); // never holds the process open
    }
  }

  private flush(now: number): void {
    const summary = this.gate.close(now);
    if (summary !== undefined) this.log.warn(summary, `${this.what} (summary: further lines suppressed)`);
  }
}
