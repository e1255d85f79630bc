// The agent's job machinery as `runAgent` needs it: a runner over a capability registry, with
// receipts kept beside the state file.
import type { Logger } from "pino";
import { CapabilityRegistry } from "./registry.js";
import { ReceiptStore, receiptsPathFor } from "./receipts.js";
import { JobRunner } from "./runner.js";
import type { JobRunMetrics } from "../metrics.js";
import type { Clock } from "../../common/clock.js";

export { CapabilityRegistry, JobFailureError } from "./registry.js";
export type { JobHandler } from "./registry.js";
export { JobRunner, LeaseLost, JobCancelled } from "./runner.js";
export { ReceiptStore, receiptsPathFor } from "./receipts.js";

export interface OpenJobRunnerOptions {
  statePath: string;
  log: Logger;
  signal?: AbortSignal;
  /** The handlers; none by default (the agent then advertises no capabilities). */
  registry?: CapabilityRegistry;
  /** Defaults to receipts.json beside the state file. */
  receiptsPath?: string;
  retryDelayMs?: number;
  metrics?: JobRunMetrics | undefined;
  /** The runner's time (default: the system clock). */
  clock?: Clock;
}

export async function openJobRunner(opts: OpenJobRunnerOptions): Promise<JobRunner> {
  const receipts = await ReceiptStore.open(opts.receiptsPath ?? receiptsPathFor(opts.statePath));
  return new JobRunner({
    registry: opts.registry ?? new CapabilityRegistry(),
    receipts,
    log: opts.log,
    ...(opts.signal !== undefined ? { signal: opts.signal } : {}),
    ...(opts.retryDelayMs !== undefined ? { retryDelayMs: opts.retryDelayMs } : {}),
    metrics: opts.metrics,
    ...(opts.clock !== undefined ? { clock: opts.clock } : {}),
  });
}
