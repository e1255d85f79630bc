// The periodic sweeps (run by the jobs loop server/start/jobs.ts starts on every replica): leases that lapsed on online
// nodes, and work on nodes unreachable past the reclaim grace. Also the expiry rule applied when
// a reconnecting agent no longer holds a lease.
import type { Job as JobRow, Prisma, PrismaClient } from "../../gen/prisma/client.js";
import { JobFailureCode } from "../../gen/proto/modelforge/jobs/v1/jobs_pb.js";
import { recordAudit, systemActor } from "../audit/audit.js";
import { afterLeaseExpiry } from "./lease.js";
import { reclaimDue } from "../liveness/rules.js";
import { failureCodeOf, failureJson, recordOf } from "./codec.js";
import type { JobWork } from "./work.js";
import { endAttempt } from "./sql.js";

/** Reason recorded on work reclaimed from an unreachable node. */
export const RECLAIMED = "node unreachable: reclaimed";
/** Deployment states that describe something running on a node. */
/** Most expired or reclaimable rows handled per sweep. */
const SWEEP_LIMIT = 500;

/**
 * Nodes not decommissioned, with leased jobs, whose stored heartbeat is older
 * than `heardBefore` (a node never heard from is not listed; the stored time errs old, so the
 * caller checks the one in memory too). Driven from the work, not the fleet: as a relation filter
 * (EXISTS per node) PostgreSQL tested every node's jobs and deployments on each sweep, every
 * second, on an idle fleet too (bench/sweeps.ts times the sweep).
 */
export function unreachableWithWork(
  prisma: PrismaClient,
  heardBefore: Date,
  limit: number,
): Promise<{ id: string; lastHeartbeatAt: Date | null }[]> {
  return prisma.$queryRaw`
    SELECT n.id::text AS id, n."lastHeartbeatAt"
      FROM "Node" AS n
     WHERE n.id IN (SELECT "nodeId" FROM "Job" WHERE state = 'leased')
       AND n."decommissionedAt" IS NULL
       AND n."lastHeartbeatAt" < ${heardBefore}
     ORDER BY n.id
     LIMIT ${limit}`;
}

/**
 * Leases that lapsed without renewal on nodes that are online: back to the queue with the next
 * attempt, or failed when attempts are exhausted, or cancelled when a cancel was requested.
 * A lapsed lease on a node that is not online is left alone: the node may still be running it,
 * and either it comes back (and reports what it runs) or its work is reclaimed.
 */
export async function expireLeases(ctx: JobWork, now = ctx.clock.now()): Promise<number> {
  // Lapsed leases on nodes that are not online stay (possibly many, for a long while), so they
  // are filtered out before the batch is cut, or they would starve the others.
  const lapsed = await ctx.prisma.job.findMany({
    where: { state: "leased", leaseExpiresAt: { lte: new Date(now) } },
    orderBy: { leaseExpiresAt: "asc" },
    select: { id: true, node: { select: { id: true, lastHeartbeatAt: true } } },
    take: 20 * SWEEP_LIMIT,
  });
  const due = lapsed.filter((j) => ctx.liveness.of(j.node, now) === "online").slice(0, SWEEP_LIMIT);
  if (due.length === 0) return 0;
  const rows = await ctx.prisma.job.findMany({ where: { id: { in: due.map((j) => j.id) } } });
  let changed = 0;
  for (const job of rows) {
    const outcome = afterLeaseExpiry(recordOf(job), now);
    if (outcome === null) continue;
    if (await applyExpiry(ctx, job, outcome, now, { leaseExpiresAt: { lte: new Date(now) } })) {
      changed++;
      ctx.metrics?.leaseExpired();
      ctx.log.info({ jobId: job.id, nodeId: job.nodeId, attempt: job.attempt, to: outcome.state }, "lease expired");
    }
  }
  return changed;
}

export async function applyExpiry(
  ctx: JobWork,
  job: JobRow,
  outcome: NonNullable<ReturnType<typeof afterLeaseExpiry>>,
  now: number,
  leaseCondition: Prisma.JobWhereInput,
  correlationId?: string,
): Promise<boolean> {
  const applied = await ctx.prisma.$transaction(async (tx) => {
    const data: Prisma.JobUpdateManyMutationInput =
      outcome.state === "pending"
        ? { state: "pending", leaseExpiresAt: null }
        : {
            state: outcome.state,
            leaseExpiresAt: null,
            finishedAt: new Date(now),
            failure: failureJson(failureCodeOf(outcome.failure.code), outcome.failure.message, false),
          };
    const moved = await tx.job.updateMany({ where: { id: job.id, state: "leased", attempt: job.attempt, ...leaseCondition }, data });
    if (moved.count !== 1) return false;
    await endAttempt(tx, job.id, job.attempt, "expired", now);
    if (outcome.state !== "pending") {
      await recordAudit(tx, {
        actor: systemActor,
        action: outcome.state === "failed" ? "job.failed" : "job.cancelled",
        targetType: "job",
        targetId: job.id,
        correlationId,
        details: { code: outcome.failure.code, reason: outcome.failure.message, attempt: String(job.attempt) },
      });
    }
    return true;
  });
  if (!applied) return false;
  if (outcome.state === "pending") ctx.leasing.kick(job.nodeId);
  else ctx.leasing.later("next in ordering key", () => ctx.leasing.afterFinish(job));
  return true;
}

/**
 * Work on nodes unreachable for longer than the offline threshold plus the reclaim grace:
 * leased jobs are marked failed ("node unreachable: reclaimed") and audited. Nothing is started
 * elsewhere: a partitioned node may still be running it. Pending jobs of such a node stay
 * pending; they are leased only once it is online again. Deployment replicas on such a node are
 * the deployment controller's: it places them elsewhere (server/deployments/node-loss.ts).
 */
export async function reclaimUnreachable(ctx: JobWork, now = ctx.clock.now()): Promise<{ jobs: string[] }> {
  const config = ctx.settings;
  // The persisted heartbeat is never newer than the one in memory, so a node it shows as recent
  // is not due; only the others are looked at further.
  const nodes = await unreachableWithWork(ctx.prisma, new Date(now - config.offlineAfterMs - config.reclaimGraceMs), SWEEP_LIMIT);
  const reclaimed = { jobs: [] as string[] };
  for (const node of nodes) {
    const last = ctx.liveness.lastHeartbeatAt(node);
    if (!reclaimDue(last, now, config.offlineAfterMs, config.reclaimGraceMs)) continue;
    const details = { reason: RECLAIMED, nodeId: node.id, unreachableForMs: String(now - (last ?? now)) };
    const jobs = await ctx.prisma.job.findMany({ where: { nodeId: node.id, state: "leased" }, take: SWEEP_LIMIT });
    for (const job of jobs) {
      const done = await ctx.prisma.$transaction(async (tx) => {
        const moved = await tx.job.updateMany({
          where: { id: job.id, state: "leased", attempt: job.attempt },
          data: {
            state: "failed",
            leaseExpiresAt: null,
            finishedAt: new Date(now),
            failure: failureJson(JobFailureCode.NODE_UNREACHABLE, RECLAIMED, false),
          },
        });
        if (moved.count !== 1) return false;
        await endAttempt(tx, job.id, job.attempt, "reclaimed", now);
        await recordAudit(tx, {
          actor: systemActor,
          action: "job.failed",
          targetType: "job",
          targetId: job.id,
          details: { ...details, code: "NODE_UNREACHABLE", attempt: String(job.attempt) },
        });
        return true;
      });
      if (!done) continue;
      reclaimed.jobs.push(job.id);
      ctx.metrics?.leaseReclaimed();
      ctx.log.warn({ jobId: job.id, nodeId: node.id, attempt: job.attempt }, "job reclaimed: node unreachable");
      ctx.leasing.later("next in ordering key", () => ctx.leasing.afterFinish(job));
    }
  }
  return reclaimed;
}
