// Runs a periodic task without overlap: the next round starts only after the previous one ends.
// Rounds are paced by the injected clock, so a test with a manual clock runs one by ticking it.
// A round that fails because the database cannot be reached is the outage monitor's to report
// (one line when lost, one when back), not a line per round.
import type { Clock } from "../common/clock.js";
import type { Logger } from "./observability/logger.js";
import type { OutageSink } from "./db/availability.js";

export function every(
  clock: Clock,
  intervalMs: number,
  name: string,
  log: Logger,
  task: () => Promise<unknown>,
  outage?: OutageSink,
): () => Promise<void> {
  const stop = new AbortController();
  const running = (async () => {
    while (!stop.signal.aborted) {
      await clock.sleep(intervalMs, stop.signal);
      if (stop.signal.aborted) break;
      await task().catch((err: unknown) => {
        if (outage?.failed(err)) return;
        log.error({ task: name, error: (err as Error).message }, "periodic task failed");
      });
    }
  })();
  return async () => {
    stop.abort();
    await running;
  };
}
