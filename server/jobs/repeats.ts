// A CompleteJob or FailJob for an attempt that has already ended. An agent repeats its report when
// the first reply was lost (a dropped connection, a database blip); if that first report was
// applied, the repeat must be answered as it was, or the agent would take a finished job for a
// lost lease. Pure: the caller passes what the database holds about the job and the attempt.
import { equals } from "@bufbuild/protobuf";
import { JobFailureSchema, JobResultSchema, type JobFailure, type JobResult } from "../../gen/proto/modelforge/jobs/v1/jobs_pb.js";
import { isFinished, LEASE_LOST, type JobState } from "./lease.js";

export type ReportedOutcome = { kind: "result"; result: JobResult } | { kind: "failure"; failure: JobFailure };

export interface EndedAttempt {
  /** JobAttempt.outcome: null while the attempt runs. */
  outcome: string | null;
  /** What the agent reported when its report ended the attempt (undefined if none was recorded). */
  recorded: ReportedOutcome | undefined;
}

export type RepeatVerdict =
  /** The attempt already ended with exactly this outcome: answer as the first time. */
  | { kind: "same"; willRetry: boolean }
  /** The attempt already ended with another outcome: refused (aborted). */
  | { kind: "different"; reason: string }
  /** Not a repeat (the attempt runs, or the server ended it): the ordinary report rules apply. */
  | { kind: "none" };

/** Outcomes an agent's own report gives an attempt; the others (expired, reclaimed) are the server's. */
const REPORTED = new Set(["succeeded", "failed", "cancelled"]);

/**
 * Identical means the same kind and an equal message: for a result, every field of the typed
 * result; for a failure, its code, message and retryable flag. `willRetry` is what the first answer
 * said: a failure was retried unless the job finished at that attempt.
 */
export function judgeRepeat(
  job: { state: JobState; attempt: number },
  attempt: number,
  ended: EndedAttempt | null,
  report: ReportedOutcome | undefined,
): RepeatVerdict {
  if (ended === null || ended.outcome === null || !REPORTED.has(ended.outcome) || ended.recorded === undefined) return { kind: "none" };
  const recorded = ended.recorded;
  const same =
    report !== undefined &&
    (recorded.kind === "result"
      ? report.kind === "result" && equals(JobResultSchema, recorded.result, report.result)
      : report.kind === "failure" && equals(JobFailureSchema, recorded.failure, report.failure));
  if (!same) {
    return { kind: "different", reason: `${LEASE_LOST} (attempt ${attempt} already ${ended.outcome} with a different ${recorded.kind})` };
  }
  return { kind: "same", willRetry: recorded.kind === "failure" && !(isFinished(job.state) && job.attempt === attempt) };
}
