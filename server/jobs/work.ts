// What the job modules (create, reports, cancel, expiry, leasing) work with: narrow collaborators
// handed in by the engine's constructor, never the engine itself, so a job's flow goes one way:
// engine -> module -> leasing.
import type { PrismaClient } from "../../gen/prisma/client.js";
import type { Clock } from "../../common/clock.js";
import type { Logger } from "../observability/logger.js";
import type { LivenessTracker } from "../liveness/tracker.js";
import type { Leasing } from "./leasing.js";
import type { ProfileLookup } from "./profiles.js";
import type { JobMetrics } from "../observability/metrics.js";

/** The configuration jobs obey. */
export interface JobSettings {
  leaseDurationMs: number;
  defaultMaxAttempts: number;
  /** Roots artifact jobs may write under. */
  approvedRoots: string[];
  /** Work on a node unreachable for longer than offlineAfterMs + reclaimGraceMs is reclaimed. */
  offlineAfterMs: number;
  reclaimGraceMs: number;
}

/** Exactly the job settings out of a larger configuration (the engine keeps nothing else of it). */
export function jobSettingsOf(c: JobSettings): JobSettings {
  const { leaseDurationMs, defaultMaxAttempts, approvedRoots, offlineAfterMs, reclaimGraceMs } = c;
  return { leaseDurationMs, defaultMaxAttempts, approvedRoots, offlineAfterMs, reclaimGraceMs };
}

export interface JobWork {
  readonly prisma: PrismaClient;
  readonly clock: Clock;
  readonly log: Logger;
  readonly settings: JobSettings;
  /** Liveness by server-received heartbeats, the newer of memory and database. */
  readonly liveness: LivenessTracker;
  /** Leasing passes, pushes down sessions here, and follow-ups. */
  readonly leasing: Leasing;
  /** Runtime profiles by name, resolved into the leases that name them. */
  readonly profiles: ProfileLookup;
  readonly metrics?: JobMetrics | undefined;
}
