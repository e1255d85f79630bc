// Job and lease transition rules. Pure: the caller passes the clock (epoch milliseconds) and
// applies the returned transition in its own transaction (typically a conditional update on
// state + attempt, so that two replicas cannot both apply one).
//
// Attempt numbering: a job that has never been leased has attempt 0; each claim increments it,
// so the first lease is attempt 1 and a job is leased at most `maxAttempts` times.
//
// Expiry boundary: a lease is valid strictly before `leaseExpiresAt`. At `now >= leaseExpiresAt`
// it has expired: reports are refused and the sweeper may re-queue the job. Using one comparison
// in both places means there is no instant at which a report is accepted for a job that the
// sweeper is also allowed to hand to another attempt.

export type JobState = "pending" | "leased" | "succeeded" | "failed" | "cancelled";

export interface JobRecord {
  state: JobState;
  /** The current (latest issued) attempt; 0 before the first lease. */
  attempt: number;
  /** How many leases the job may get in all (default five). */
  maxAttempts: number;
  /** Epoch ms at which the current lease lapses; null when not leased. */
  leaseExpiresAt: number | null;
  /** An operator asked to cancel; the job ends `cancelled` instead of being retried. */
  cancelRequested: boolean;
  /** Jobs sharing a key are leased strictly in `seq` order, one at a time. Null or "" = no key. */
  orderingKey: string | null;
  /** Creation order (monotonically increasing). */
  seq: bigint;
}

/** Default lease duration: two minutes, renewed by progress. */
export const DEFAULT_LEASE_DURATION_MS = 2 * 60 * 1000;
/** Every refusal of a report because the reporter no longer holds the lease starts with this. */
export const LEASE_LOST = "lease lost: stop work";

const FINISHED: ReadonlySet<JobState> = new Set<JobState>(["succeeded", "failed", "cancelled"]);

export function isFinished(state: JobState): boolean {
  return FINISHED.has(state);
}

/** Whether a lease is still valid at `now` (valid strictly before its expiry instant). */
export function isLeaseLive(job: Pick<JobRecord, "state" | "leaseExpiresAt">, now: number): boolean {
  return job.state === "leased" && job.leaseExpiresAt !== null && now < job.leaseExpiresAt;
}

/** When a lease granted (or renewed) at `now` lapses. */
export function leaseExpiry(now: number, leaseDurationMs: number): number {
  if (!Number.isFinite(now)) throw new RangeError(`now must be a finite epoch-ms time, got ${now}`);
  if (!Number.isFinite(leaseDurationMs) || leaseDurationMs <= 0) {
    throw new RangeError(`lease duration must be a positive number of milliseconds, got ${leaseDurationMs}`);
  }
  return now + leaseDurationMs;
}

export type ReportCheck = { ok: true } | { ok: false; code: "aborted" | "failed_precondition"; reason: string };

/**
 * May a report (progress, complete or fail) carrying `attempt` be applied to `job` at `now`?
 *
 * - `aborted` (409, reason starts with "lease lost: stop work"): the reporter does not hold the
 *   lease: the job is finished, not leased, the attempt is stale, or the lease has expired.
 * - `failed_precondition`: the attempt is one the server never issued (not a positive integer, or
 *   higher than the current attempt). That is a broken agent, not a lost race.
 *
 * A cancel request does not invalidate the lease: the agent learns of it on the stream, and
 * its report is still accepted while the lease is live.
 */
export function checkReport(job: JobRecord, attempt: number, now: number): ReportCheck {
  if (isFinished(job.state)) {
    return { ok: false, code: "aborted", reason: `${LEASE_LOST} (job already ${job.state})` };
  }
  if (!Number.isInteger(attempt) || attempt < 1) {
    return { ok: false, code: "failed_precondition", reason: `attempt must be a positive integer, got ${attempt}` };
  }
  if (attempt > job.attempt) {
    return {
      ok: false,
      code: "failed_precondition",
      reason: `attempt ${attempt} was never issued (current attempt is ${job.attempt})`,
    };
  }
  if (attempt < job.attempt) {
    return {
      ok: false,
      code: "aborted",
      reason: `${LEASE_LOST} (attempt ${attempt} is stale; current attempt is ${job.attempt})`,
    };
  }
  if (job.state !== "leased") {
    return { ok: false, code: "aborted", reason: `${LEASE_LOST} (job is ${job.state}, not leased)` };
  }
  if (job.leaseExpiresAt === null) {
    return { ok: false, code: "aborted", reason: `${LEASE_LOST} (lease has no expiry)` };
  }
  if (now >= job.leaseExpiresAt) {
    return {
      ok: false,
      code: "aborted",
      reason: `${LEASE_LOST} (lease of attempt ${attempt} expired ${now - job.leaseExpiresAt} ms ago)`,
    };
  }
  return { ok: true };
}

/** Machine-readable failure codes used here; names of the proto enum `JobFailureCode`. */
export type LeaseFailureCode = "ATTEMPTS_EXHAUSTED" | "CANCELLED";

export interface RecordedFailure {
  code: LeaseFailureCode;
  message: string;
  retryable: false;
}

export type LeaseExpiryOutcome =
  | { state: "pending" }
  | { state: "failed"; failure: RecordedFailure }
  | { state: "cancelled"; failure: RecordedFailure };

/**
 * What becomes of a leased job whose lease has lapsed at `now`; null if there is nothing to do
 * (the job is not leased, or its lease is still live).
 *
 * - cancel requested: `cancelled` (never retried);
 * - attempts left (`attempt < maxAttempts`): back to `pending`; the next claim issues attempt+1;
 * - otherwise: `failed` with ATTEMPTS_EXHAUSTED.
 *
 * The job's lease fields should be cleared (leaseExpiresAt = null) when applying any outcome.
 */
export function afterLeaseExpiry(job: JobRecord, now: number): LeaseExpiryOutcome | null {
  if (job.state !== "leased") return null;
  if (job.leaseExpiresAt !== null && now < job.leaseExpiresAt) return null;
  if (job.cancelRequested) {
    return {
      state: "cancelled",
      failure: {
        code: "CANCELLED",
        message: `cancelled by operator; lease expired on attempt ${job.attempt} of ${job.maxAttempts}`,
        retryable: false,
      },
    };
  }
  if (job.attempt < job.maxAttempts) return { state: "pending" };
  return {
    state: "failed",
    failure: {
      code: "ATTEMPTS_EXHAUSTED",
      message: `lease expired on attempt ${job.attempt} of ${job.maxAttempts}: attempts exhausted`,
      retryable: false,
    },
  };
}

/**
 * What becomes of a job whose agent reported failure (after `checkReport` accepted the report).
 * Retried only when the failure is retryable, attempts remain and no cancel was requested; a
 * cancel-requested job that fails stays `failed` (its own failure is the more useful record).
 */
export function afterFailure(job: JobRecord, failure: { retryable: boolean }): { state: "pending" | "failed"; willRetry: boolean } {
  if (failure.retryable && !job.cancelRequested && job.attempt < job.maxAttempts) {
    return { state: "pending", willRetry: true };
  }
  return { state: "failed", willRetry: false };
}

/** The fields a claim sets on a pending job: the next attempt and its expiry. */
export function claimLease(
  job: JobRecord,
  now: number,
  leaseDurationMs: number = DEFAULT_LEASE_DURATION_MS,
): { state: "leased"; attempt: number; leaseExpiresAt: number } {
  if (job.state !== "pending") throw new Error(`only a pending job can be leased; this one is ${job.state}`);
  if (job.cancelRequested) throw new Error("a job with a cancel request cannot be leased");
  if (job.attempt >= job.maxAttempts) {
    throw new Error(`attempts exhausted (${job.attempt} of ${job.maxAttempts}); the job cannot be leased again`);
  }
  return { state: "leased", attempt: job.attempt + 1, leaseExpiresAt: leaseExpiry(now, leaseDurationMs) };
}

export type LeaseCandidate = JobRecord & { id: string };

function keyOf(job: JobRecord): string | null {
  return job.orderingKey === null || job.orderingKey === "" ? null : job.orderingKey;
}

function bySeq(a: LeaseCandidate, b: LeaseCandidate): number {
  if (a.seq !== b.seq) return a.seq < b.seq ? -1 : 1;
  return a.id < b.id ? -1 : a.id > b.id ? 1 : 0;
}

/**
 * Which of a node's jobs may be leased now, as ids in `seq` order.
 *
 * - Finished jobs are ignored (the caller should pass only unfinished ones, but need not).
 * - A pending job without an ordering key is eligible unless a cancel was requested.
 * - Per ordering key, only the earliest unfinished job (lowest seq) can be eligible, and only
 *   when it is pending without a cancel request. A leased job anywhere in the key blocks the
 *   whole key, and so does a cancel-requested pending head (it holds its place until the cancel
 *   finishes it, which keeps the key strictly ordered).
 */
export function nextLeasable(candidates: readonly LeaseCandidate[]): string[] {
  const unfinished = candidates.filter((job) => !isFinished(job.state)).sort(bySeq);
  const keyed = new Map<string, LeaseCandidate[]>();
  const eligible: LeaseCandidate[] = [];
  for (const job of unfinished) {
    const key = keyOf(job);
    if (key === null) {
      if (job.state === "pending" && !job.cancelRequested) eligible.push(job);
      continue;
    }
    const group = keyed.get(key);
    if (group) group.push(job);
    else keyed.set(key, [job]);
  }
  for (const group of keyed.values()) {
    const head = group[0];
    if (head?.state !== "pending" || head.cancelRequested) continue;
    if (group.some((job) => job.state === "leased")) continue;
    eligible.push(head);
  }
  return eligible.sort(bySeq).map((job) => job.id);
}
