// Tells the operator once that the database was lost and once that it is back (with how long it
// was gone), instead of every periodic task logging the driver's error on every tick. While the
// database is lost the monitor probes it at a steady pace; the first probe that succeeds ends the
// outage. Errors that are not connectivity failures are none of its business.
import { isDatabaseUnavailable } from "./availability.js";
import { errorCode } from "./errors.js";

export interface OutageLogger {
  info(obj: Record<string, unknown>, msg: string): void;
  warn(obj: Record<string, unknown>, msg: string): void;
}

export class OutageMonitor {
  private lostAt: number | undefined;
  private timer: NodeJS.Timeout | undefined;
  private closed = false;

  constructor(
    private readonly probe: () => Promise<unknown>,
    private readonly log: OutageLogger | undefined,
    private readonly describe: string,
    private readonly probeIntervalMs = 500,
  ) {}

  /** Whether an outage is in progress. */
  get lost(): boolean {
    return this.lostAt !== undefined;
  }

  /**
   * Reports a failed database operation. True when it was a connectivity failure: the outage is
   * then accounted for here and the caller logs nothing more.
   */
  failed(err: unknown): boolean {
    if (!isDatabaseUnavailable(err)) return false;
    if (this.lostAt !== undefined || this.closed) return true;
    this.lostAt = Date.now();
    this.log?.warn({ db: this.describe, cause: briefly(err) }, "database lost: answering from caches what they hold, unavailable the rest");
    this.schedule();
    return true;
  }

  /** Stops probing (the database is being closed). */
  close(): void {
    this.closed = true;
    clearTimeout(this.timer);
  }

  private schedule(): void {
    if (this.closed) return;
    this.timer = setTimeout(() => {
      this.probe().then(
        () => {
          if (this.lostAt === undefined || this.closed) return;
          const outageMs = Date.now() - this.lostAt;
          this.lostAt = undefined;
          this.log?.info({ db: this.describe, outageMs }, "database back");
        },
        () => this.schedule(),
      );
    }, this.probeIntervalMs);
    this.timer.unref();
  }
}

/** The code and the last line of a driver error: Prisma's message starts with the calling source. */
function briefly(err: unknown): string {
  const text = err instanceof Error ? err.message : String(err);
  const last = text.trim().split("\n").at(-1)?.trim() ?? "";
  const code = errorCode(err);
  return (code !== undefined && !last.includes(code) ? `${code}: ${last}` : last).slice(0, 200);
}
