// Runs a periodic task without overlap: the next round starts only after the previous one ends.
import type { Logger } from "../observability/logger.js";

export function every(intervalMs: number, name: string, log: Logger, task: () => Promise<unknown>): () => Promise<void> {
  let stopped = false;
  let running: Promise<unknown> = Promise.resolve();
  let timer: NodeJS.Timeout | undefined;
  const tick = () => {
    running = task()
      .catch((err: unknown) => log.error({ task: name, error: (err as Error).message }, "periodic task failed"))
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
