// What a job attempt ends with, and the rules that decide it: a handler's result checked against
// its capability and the wire, a thrown error turned into a typed failure, a recorded receipt read
// back, and the message for a lease this agent cannot run. Pure: the runner does the I/O.
import { create, fromJson, toBinary, toJson, type JsonValue } from "@bufbuild/protobuf";
import { capabilityOfResult, capabilityOfSpec, CapabilityError } from "../../common/capabilities.js";
import {
  JobFailureCode,
  JobFailureSchema,
  JobResultSchema,
  type JobFailure,
  type JobLease,
  type JobResult,
  type JobSpec,
} from "../../gen/proto/modelforge/jobs/v1/jobs_pb.js";
import { isoTime } from "../../common/clock.js";
import { agentVersion } from "../version.js";
import { JobFailureError } from "./registry.js";
import type { Receipt } from "./receipts.js";

export type Outcome = { kind: "result"; result: JobResult } | { kind: "failure"; failure: JobFailure };

/** Failure messages are short and never carry payloads. */
const MAX_MESSAGE = 512;

export function truncate(text: string): string {
  return text.length > MAX_MESSAGE ? `${text.slice(0, MAX_MESSAGE - 1)}…` : text;
}

export function failureOutcome(code: JobFailureCode, message: string, retryable: boolean): Outcome {
  return { kind: "failure", failure: create(JobFailureSchema, { code, message, retryable }) };
}

/** The capability a lease's spec names; undefined when it names none this agent's contract knows. */
export function capabilityOfLease(lease: JobLease): string | undefined {
  if (lease.spec === undefined) return undefined;
  try {
    return capabilityOfSpec(lease.spec);
  } catch (err) {
    if (err instanceof CapabilityError) return undefined;
    throw err;
  }
}

/** Why a lease cannot run here: an unregistered capability, a kind newer than this agent, or none. */
export function unsupportedMessage(capability: string | undefined, spec: JobSpec | undefined, implemented: string[]): string {
  const list = `implements: ${implemented.join(", ") || "none"}`;
  if (capability !== undefined) return `this agent does not implement capability "${capability}"; it ${list}`;
  if ((spec?.$unknown?.length ?? 0) > 0) return `this agent does not know the job's kind (newer than agent ${agentVersion}); it ${list}`;
  return `the job spec names no capability; this agent ${list}`;
}

/** A handler's result as it may be reported: of its own capability, and encodable. */
export function checkedResult(capability: string, produced: JobResult): Outcome {
  const answered = capabilityOfResult(produced);
  if (answered !== capability) {
    const what = answered ? `a ${answered}` : "no";
    return failureOutcome(JobFailureCode.INTERNAL, `the handler of ${capability} returned ${what} result`, false);
  }
  const unencodable = encodingProblem(produced);
  if (unencodable !== undefined) {
    // Sent as it is, it would fail the whole Session, which would reconnect and send it again, forever.
    const message = `the handler of ${capability} returned a result that cannot be encoded: ${unencodable}`;
    return failureOutcome(JobFailureCode.INTERNAL, truncate(message), false);
  }
  return { kind: "result", result: produced };
}

/** What a handler's throw means: cancelled (when a cancel stopped it), its typed failure, or a retryable INTERNAL. */
export function thrownOutcome(err: unknown, cancelReason: string | undefined): Outcome {
  if (cancelReason !== undefined) return failureOutcome(JobFailureCode.CANCELLED, truncate(`cancelled: ${cancelReason}`), false);
  if (err instanceof JobFailureError) return failureOutcome(err.code, truncate(err.message), err.retryable);
  return failureOutcome(JobFailureCode.INTERNAL, truncate(`unexpected error: ${(err as Error).message ?? String(err)}`), true);
}

/**
 * Whether the outcome records finished work, which a receipt keeps: a success or a failure that
 * will not be retried. An interrupted (cancelled) job did not finish.
 */
export function finishedWork(outcome: Outcome): boolean {
  return outcome.kind === "result" || (!outcome.failure.retryable && outcome.failure.code !== JobFailureCode.CANCELLED);
}

/** The receipt of an outcome, finished at `finishedAtMs`. */
export function receiptOf(jobId: string, capability: string, attempt: number, outcome: Outcome, finishedAtMs: number): Receipt {
  return {
    jobId,
    capability,
    attempt,
    finishedAt: isoTime(finishedAtMs),
    ...(outcome.kind === "result"
      ? { result: toJson(JobResultSchema, outcome.result) as JsonValue }
      : { failure: toJson(JobFailureSchema, outcome.failure) as JsonValue }),
  };
}

/** The outcome a receipt recorded, to send again. */
export function outcomeOfReceipt(receipt: Receipt): Outcome {
  if (receipt.result !== undefined) {
    return { kind: "result", result: fromJson(JobResultSchema, receipt.result, { ignoreUnknownFields: true }) };
  }
  return { kind: "failure", failure: fromJson(JobFailureSchema, receipt.failure ?? {}, { ignoreUnknownFields: true }) };
}

/** Why a result cannot go on the wire (e.g. a Duration with fractional nanos), if it cannot. */
function encodingProblem(result: JobResult): string | undefined {
  try {
    toBinary(JobResultSchema, result);
    return undefined;
  } catch (err) {
    return (err as Error).message;
  }
}
