// Runs a periodic task without overlap: the next round starts only after the previous one ends.
// A round that fails because the database cannot be reached is the outage monitor's to report
// (one line when lost, one when back), not a line per round.
import type { Logger } from "../observability/logger.js";
import type { OutageSink } from "../db/availability.js";

export function every(intervalMs: number, name: string, log: Logger, task: () => Promise<unknown>, outage?: OutageSink): () => Promise<void> {
  let stopped = false;
  let running: Promise<unknown> = Promise.resolve();
  let timer: NodeJS.Timeout | undefined;
  const tick = () => {
    running = task()
      .catch((err: unknown) => {
        if (outage?.failed(err)) return;
        log.error({ task: name, error: (err as Error).message }, "periodic task failed");
      })
      .finally(() => {
        if (!stopped) timer = setTimeout(tick, intervalMs);
      });
  };
  timer = setTimeout(tick, intervalMs);
  return async () => {
    stopped = true;
    clearTimeout(timer);
    await running;
  };
}
