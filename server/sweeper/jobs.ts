// The jobs sweep, on every replica at the reconcile interval: expire lapsed leases, reclaim work
// on unreachable nodes, and push pending work to the sessions held here (which covers jobs created
// through another replica). Each step is a conditional update per job, so replicas never apply
// one change twice.
import type { Deps } from "../app.js";
import type { Logger } from "../observability/logger.js";
import { engineOf } from "../jobs/engine.js";
import { every } from "./loop.js";

export function sweepJobs(deps: Deps): Promise<void> {
  return engineOf(deps).sweep();
}

/** Starts the sweep loop; the returned function stops it and waits for a round in progress. */
export function jobsLoop(deps: Deps, log: Logger = deps.log): () => Promise<void> {
  return every(deps.config.reconcileIntervalMs, "jobs", log, () => sweepJobs(deps), deps.db.outage);
}
