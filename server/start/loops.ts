// The periodic tasks each subsystem brings, run together once the server is ready and stopped
// together when it stops. Each runs without overlap (the next round starts only after the previous
// one ends), paced by the injected clock, so a test with a manual clock runs one by ticking it. A
// round that fails because the database cannot be reached is the outage monitor's to report (one
// line when lost, one when back), not a line per round.
import type { Clock } from "../../common/clock.js";
import type { Logger } from "../observability/logger.js";
import type { OutageSink } from "../db/availability.js";

export interface Loop {
  name: string;
  everyMs: number;
  run: () => Promise<unknown>;
  /** Where a round that failed for want of the database is reported (once per outage), if it uses one. */
  outage?: OutageSink;
}

/** Starts every loop; the function returned stops them all and waits for their rounds to end. */
export function runLoops(clock: Clock, log: Logger, loops: readonly Loop[]): () => Promise<void> {
  const stops = loops.map((loop) => every(clock, log, loop));
  return async () => {
    await Promise.all(stops.map((stop) => stop()));
  };
}

function every(clock: Clock, log: Logger, loop: Loop): () => Promise<void> {
  const stop = new AbortController();
  const running = (async () => {
    while (!stop.signal.aborted) {
      await clock.sleep(loop.everyMs, stop.signal);
      if (stop.signal.aborted) break;
      await loop.run().catch((err: unknown) => {
        if (loop.outage?.failed(err)) return;
        log.error({ task: loop.name, error: (err as Error).message }, "periodic task failed");
      });
    }
  })();
  return async () => {
    stop.abort();
    await running;
  };
}
