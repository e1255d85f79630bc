// An operator cancels a job: a pending one ends at once; a leased one is marked and its node told
// to stop (over its session here, or in its next progress reply).
import { Code, ConnectError } from "@connectrpc/connect";
import type { Job as JobRow } from "../../gen/prisma/client.js";
import { JobFailureCode } from "../../gen/proto/modelforge/jobs/v1/jobs_pb.js";
import { recordAudit, type AuditActor } from "../audit/audit.js";
import { failureJson } from "./codec.js";
import type { JobWork } from "./work.js";
import { jobIdOf } from "./errors.js";

const MAX_CANCEL_REASON = 256;

export async function cancelJob(ctx: JobWork, rawId: string, reason: string, correlationId: string, by: AuditActor): Promise<JobRow> {
  const id = jobIdOf(rawId);
  if (reason.length > MAX_CANCEL_REASON) throw new ConnectError(`reason: at most ${MAX_CANCEL_REASON} characters`, Code.InvalidArgument);
  const why = reason.trim() || "cancelled by operator";
  for (let tries = 0; tries < 5; tries++) {
    const job = await ctx.prisma.job.findUnique({ where: { id } });
    if (job === null) throw new ConnectError(`job ${id} not found`, Code.NotFound);
    if (job.state === "cancelled") return job;
    if (job.state === "succeeded" || job.state === "failed") {
      throw new ConnectError(`job ${id} already ${job.state}; nothing to cancel`, Code.FailedPrecondition);
    }
    const now = new Date(ctx.clock.now());
    const pending = job.state === "pending";
    const applied = await ctx.prisma.$transaction(async (tx) => {
      const moved = await tx.job.updateMany({
        where: { id, state: job.state, attempt: job.attempt },
        data: pending
          ? {
              state: "cancelled",
              cancelRequested: true,
              cancelReason: why,
              failure: failureJson(JobFailureCode.CANCELLED, `cancelled by operator: ${why}`, false),
              finishedAt: now,
            }
          : { cancelRequested: true, cancelReason: why },
      });
      if (moved.count !== 1) return false;
      await recordAudit(tx, {
        ...by,
        action: "job.cancel_requested",
        targetType: "job",
        targetId: id,
        correlationId,
        details: { reason: why, state: job.state, attempt: String(job.attempt) },
      });
      return true;
    });
    if (!applied) continue; // the job moved meanwhile; decide again
    if (pending) ctx.leasing.later("next in ordering key", () => ctx.leasing.afterFinish(job));
    else ctx.leasing.sendCancel(job.nodeId, id, job.attempt, why); // elsewhere: the next progress reply says so
    return (await ctx.prisma.job.findUnique({ where: { id } }))!;
  }
  throw new ConnectError(`job ${id} kept changing; try again`, Code.Aborted);
}
