// The periodic tasks each subsystem brings, run together once the server is ready and stopped
// together when it stops.
import type { Clock } from "../../common/clock.js";
import type { Logger } from "../observability/logger.js";
import type { OutageSink } from "../db/availability.js";
import { every } from "../loop.js";

export interface Loop {
  name: string;
  everyMs: number;
  run: () => Promise<unknown>;
  /** Where a round that failed for want of the database is reported (once per outage), if it uses one. */
  outage?: OutageSink;
}

/** Starts every loop; the function returned stops them all and waits for their rounds to end. */
export function runLoops(clock: Clock, log: Logger, loops: readonly Loop[]): () => Promise<void> {
  const stops = loops.map((l) => every(clock, l.everyMs, l.name, log, l.run, l.outage));
  return async () => {
    await Promise.all(stops.map((stop) => stop()));
  };
}
