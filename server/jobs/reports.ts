// Agent reports on a leased attempt: progress (which renews the lease), completion and failure.
// The Session stream and the unary RPCs share these. Each is a conditional update on (id, state,
// attempt, unexpired lease): a stale attempt or a lapsed lease is refused, never applied. A
// completion or failure repeating the outcome an attempt already ended with is answered as the
// first time (./repeats.ts).
import { Code, ConnectError } from "@connectrpc/connect";
import { create, fromJson, toJson, type JsonValue } from "@bufbuild/protobuf";
import { timestampFromMs } from "@bufbuild/protobuf/wkt";
import type { Job as JobRow, Prisma } from "../../gen/prisma/client.js";
import {
  CompleteJobResponseSchema,
  FailJobResponseSchema,
  ReportJobProgressResponseSchema,
  type CompleteJobRequest,
  type CompleteJobResponse,
  type FailJobRequest,
  type FailJobResponse,
  type ReportJobProgressRequest,
  type ReportJobProgressResponse,
} from "../../gen/proto/modelforge/agent/v1/agent_pb.js";
import { JobFailureCode, JobFailureSchema, JobProgressSchema, JobResultSchema } from "../../gen/proto/modelforge/jobs/v1/jobs_pb.js";
import { recordAudit, nodeActor } from "../audit/audit.js";
import { validateJobResult, validateProgress } from "./spec.js";
import { afterFailure, checkReport, leaseExpiry, type JobState, type ReportCheck } from "./lease.js";
import { failureToJson, recordOf, specFromJson } from "./codec.js";
import type { JobWork } from "./work.js";
import { jobIdOf, leaseLost, refusalOf, validating } from "./errors.js";
import { judgeRepeat, type ReportedOutcome } from "./repeats.js";
import { completeLeased, endAttempt } from "./sql.js";

const MAX_FAILURE_MESSAGE_BYTES = 1024;

/**
 * The job a report is about, at the moment of the report: not_found for an unknown id,
 * permission_denied for another node's job, and what the report rules (./lease.ts) say
 * of the attempt (a stale attempt, a lapsed lease).
 */
async function reportedJob(
  ctx: JobWork,
  nodeId: string,
  rawId: string,
  attempt: number,
): Promise<{ job: JobRow; now: number; check: ReportCheck }> {
  const id = jobIdOf(rawId);
  const job = await ctx.prisma.job.findUnique({ where: { id } });
  if (job === null) throw new ConnectError(`job ${id} not found`, Code.NotFound);
  if (job.nodeId !== nodeId) throw new ConnectError(`job ${id} is not this node's job`, Code.PermissionDenied);
  const now = ctx.clock.now();
  return { job, now, check: checkReport(recordOf(job), attempt, now) };
}

/**
 * A completion or failure that could not be applied: if the attempt already ended with this very
 * outcome, the answer the first report got (`willRetry`); if with another, aborted; otherwise
 * `refusal`, the ordinary answer to a report without a lease.
 */
async function answerAsRepeat(
  ctx: JobWork,
  jobId: string,
  attempt: number,
  report: ReportedOutcome | undefined,
  refusal: ConnectError,
): Promise<{ willRetry: boolean }> {
  const [job, ended] = await Promise.all([
    ctx.prisma.job.findUnique({ where: { id: jobId }, select: { state: true, attempt: true, result: true } }),
    ctx.prisma.jobAttempt.findUnique({ where: { jobId_attempt: { jobId, attempt } }, select: { outcome: true, failure: true } }),
  ]);
  if (job === null) throw refusal;
  const readOptions = { ignoreUnknownFields: true };
  // Success ends the job, so the job's result is its last attempt's; a failure is kept per attempt.
  const recorded: ReportedOutcome | undefined =
    ended?.outcome === "succeeded" && job.attempt === attempt && job.result !== null
      ? { kind: "result", result: fromJson(JobResultSchema, job.result as JsonValue, readOptions) }
      : ended?.failure != null
        ? { kind: "failure", failure: fromJson(JobFailureSchema, ended.failure as JsonValue, readOptions) }
        : undefined;
  const verdict = judgeRepeat(
    { state: job.state as JobState, attempt: job.attempt },
    attempt,
    ended && { outcome: ended.outcome, recorded },
    report,
  );
  if (verdict.kind === "none") throw refusal;
  if (verdict.kind === "different") throw new ConnectError(verdict.reason, Code.Aborted);
  ctx.log.debug({ jobId, attempt }, "repeated job outcome acknowledged");
  return { willRetry: verdict.willRetry };
}

export async function reportProgress(ctx: JobWork, nodeId: string, req: ReportJobProgressRequest): Promise<ReportJobProgressResponse> {
  const { job, now, check } = await reportedJob(ctx, nodeId, req.jobId, req.attempt);
  if (!check.ok) throw refusalOf(check);
  const progress = req.progress;
  if (progress !== undefined) validating(() => validateProgress(progress));
  const expiresAt = leaseExpiry(now, ctx.settings.leaseDurationMs);
  const renewed = await ctx.prisma.job.updateMany({
    where: { id: job.id, state: "leased", attempt: req.attempt, leaseExpiresAt: { gt: new Date(now) } },
    data: {
      leaseExpiresAt: new Date(expiresAt),
      ...(progress !== undefined ? { progress: toJson(JobProgressSchema, progress) as Prisma.InputJsonValue } : {}),
    },
  });
  if (renewed.count !== 1) throw leaseLost(`attempt ${req.attempt} changed while renewing`);
  return create(ReportJobProgressResponseSchema, { expiresAt: timestampFromMs(expiresAt), cancelRequested: job.cancelRequested });
}

export async function completeJob(
  ctx: JobWork,
  nodeId: string,
  req: CompleteJobRequest,
  correlationId?: string,
): Promise<CompleteJobResponse> {
  const { job, now, check } = await reportedJob(ctx, nodeId, req.jobId, req.attempt);
  const result = req.result;
  const report = result && { kind: "result" as const, result };
  if (!check.ok) {
    await answerAsRepeat(ctx, job.id, req.attempt, report, refusalOf(check));
    return create(CompleteJobResponseSchema);
  }
  if (result === undefined) throw new ConnectError("result: is required", Code.InvalidArgument);
  validating(() => validateJobResult(specFromJson(job.spec), result));
  if (!(await completeLeased(ctx.prisma, job.id, req.attempt, toJson(JobResultSchema, result), new Date(now)))) {
    // Perhaps the same report, sent twice at once (say, once unary, once on the Session), won.
    await answerAsRepeat(ctx, job.id, req.attempt, report, leaseLost(`attempt ${req.attempt} changed while completing`));
    return create(CompleteJobResponseSchema);
  }
  ctx.log.info({ jobId: job.id, nodeId, attempt: req.attempt, correlationId }, "job succeeded");
  ctx.leasing.later("next in ordering key", () => ctx.leasing.afterFinish(job));
  return create(CompleteJobResponseSchema);
}

export async function failJob(ctx: JobWork, nodeId: string, req: FailJobRequest, correlationId?: string): Promise<FailJobResponse> {
  const { job, now, check } = await reportedJob(ctx, nodeId, req.jobId, req.attempt);
  const failure = req.failure;
  const report = failure && { kind: "failure" as const, failure };
  if (!check.ok) return create(FailJobResponseSchema, await answerAsRepeat(ctx, job.id, req.attempt, report, refusalOf(check)));
  if (failure === undefined) throw new ConnectError("failure: is required", Code.InvalidArgument);
  if (failure.code === JobFailureCode.UNSPECIFIED || JobFailureCode[failure.code] === undefined) {
    throw new ConnectError("failure.code: must be one of the JobFailureCode values", Code.InvalidArgument);
  }
  if (Buffer.byteLength(failure.message, "utf8") > MAX_FAILURE_MESSAGE_BYTES) {
    throw new ConnectError(`failure.message: at most ${MAX_FAILURE_MESSAGE_BYTES} bytes`, Code.InvalidArgument);
  }
  const record = recordOf(job);
  const cancelled = job.cancelRequested && failure.code === JobFailureCode.CANCELLED;
  const next = cancelled ? { state: "cancelled" as const, willRetry: false } : afterFailure(record, failure);
  const applied = await ctx.prisma.$transaction(async (tx) => {
    const moved = await tx.job.updateMany({
      where: { id: job.id, state: "leased", attempt: req.attempt, leaseExpiresAt: { gt: new Date(now) } },
      data: {
        state: next.state,
        failure: failureToJson(failure),
        leaseExpiresAt: null,
        ...(next.state === "pending" ? {} : { finishedAt: new Date(now) }),
      },
    });
    if (moved.count !== 1) return false;
    await endAttempt(tx, job.id, req.attempt, cancelled ? "cancelled" : "failed", now, failureToJson(failure));
    if (next.state !== "pending") {
      await recordAudit(tx, {
        actor: nodeActor(nodeId),
        action: cancelled ? "job.cancelled" : "job.failed",
        targetType: "job",
        targetId: job.id,
        correlationId,
        details: { code: JobFailureCode[failure.code], attempt: String(req.attempt), retryable: String(failure.retryable) },
      });
    }
    return true;
  });
  if (!applied) {
    return create(
      FailJobResponseSchema,
      await answerAsRepeat(ctx, job.id, req.attempt, report, leaseLost(`attempt ${req.attempt} changed while failing`)),
    );
  }
  ctx.log.info(
    { jobId: job.id, nodeId, attempt: req.attempt, code: JobFailureCode[failure.code], state: next.state, correlationId },
    next.willRetry ? "job failed; will retry" : "job failed",
  );
  if (next.state === "pending") ctx.leasing.kick(nodeId);
  else ctx.leasing.later("next in ordering key", () => ctx.leasing.afterFinish(job));
  return create(FailJobResponseSchema, { willRetry: next.willRetry });
}
