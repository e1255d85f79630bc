// Runs a periodic task without overlap: the next round starts only after the previous one ends.
// Rounds are paced by the injected clock, so a test with a manual clock runs one by advancing it.
import type { Clock } from "../common/clock.js";
import type { Logger } from "./observability/logger.js";

export function every(clock: Clock, intervalMs: number, name: string, log: Logger, task: () => Promise<unknown>): () => Promise<void> {
  const stop = new AbortController();
  const running = (async () => {
    while (!stop.signal.aborted) {
      await clock.sleep(intervalMs, stop.signal);
      if (stop.signal.aborted) break;
      await task().catch((err: unknown) => log.error({ task: name, error: (err as Error).message }, "periodic task failed"));
    }
  })();
  return async () => {
    stop.abort();
    await running;
  };
}
