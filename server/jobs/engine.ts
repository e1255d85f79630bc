// Typed jobs on the server. The engine is what the RPC handlers, the Session and the sweep loop
// call; it is built from narrow collaborators and hands them to the modules that do the work:
// creation (./create.ts), agent reports (./reports.ts), cancellation (./cancel.ts), expiry and
// reclaim (./expiry.ts) and leasing (./leasing.ts). Flow goes one way: engine -> module -> leasing.
//
// The rules are the pure functions in ./lease.ts; these modules are the database around
// them. Every state change is a conditional update on (id, state, attempt[, lease expiry]), so
// several control-plane replicas on one PostgreSQL can run all of it at once: of two replicas
// racing to lease, renew, finish or expire one attempt, exactly one update matches.
//
// A lease that lapses on a node that is not online is left in place rather than re-queued: the
// node may still be running it. Either the node comes back (its Hello lists what it runs and the
// lease is renewed, or it is told to stop) or, past the offline threshold plus the reclaim grace,
// the job is reclaimed: failed, never started again on its own.
import type { AuditActor } from "../audit/audit.js";
import { create } from "@bufbuild/protobuf";
import type { Job as JobRow, PrismaClient } from "../../gen/prisma/client.js";
import {
  ClaimJobResponseSchema,
  type ClaimJobResponse,
  type CompleteJobRequest,
  type CompleteJobResponse,
  type FailJobRequest,
  type FailJobResponse,
  type Reply,
  type ReportJobProgressRequest,
  type ReportJobProgressResponse,
} from "../../gen/proto/modelforge/agent/v1/agent_pb.js";
import type { Clock } from "../../common/clock.js";
import type { Logger } from "../observability/logger.js";
import type { NodeSessions } from "../node-sessions.js";
import type { LivenessTracker } from "../liveness/tracker.js";
import { afterLeaseExpiry, leaseExpiry, LEASE_LOST } from "./lease.js";
import { leaseOf, recordOf } from "./codec.js";
import type { JobDispatch, JobMessage } from "./dispatch.js";
import type { ClusterEvent } from "../cluster/bus.js";
import { Leasing } from "./leasing.js";
import type { JobSettings, JobWork } from "./work.js";
import type { ProfileLookup } from "./profiles.js";
import { cancelJob } from "./cancel.js";
import { createJob, type CreateJobInput } from "./create.js";
import { applyExpiry, expireLeases, reclaimUnreachable } from "./expiry.js";
import { completeJob, failJob, reportProgress } from "./reports.js";
import type { JobMetrics } from "../observability/metrics.js";

export interface JobEngineDeps {
  prisma: PrismaClient;
  clock: Clock;
  log: Logger;
  liveness: LivenessTracker;
  sessions: Pick<NodeSessions, "get" | "isConnected" | "size" | "tellHolder">;
  settings: JobSettings;
  shutdown: AbortSignal;
  profiles: ProfileLookup;
  metrics?: JobMetrics | undefined;
}

export class JobEngine implements JobDispatch {
  private readonly work: JobWork;
  private readonly leasing: Leasing;

  constructor(deps: JobEngineDeps) {
    this.leasing = new Leasing({ ...deps, leaseDurationMs: deps.settings.leaseDurationMs });
    this.work = {
      prisma: deps.prisma,
      clock: deps.clock,
      log: deps.log,
      settings: deps.settings,
      liveness: deps.liveness,
      leasing: this.leasing,
      profiles: deps.profiles,
      metrics: deps.metrics,
    };
  }

  /** Hears of each job finished on this replica, by id: a deployment's step moves on at once, not at the next sweep. */
  onFinished(listener: (jobId: string) => void): void {
    this.leasing.onFinished(listener);
  }

  createJob(input: CreateJobInput): Promise<JobRow> {
    return createJob(this.work, input);
  }

  // -------------------------------------------------------------------------------------------
  // Agent reports (the Session stream and the unary RPCs share these)

  reportProgress(nodeId: string, req: ReportJobProgressRequest): Promise<ReportJobProgressResponse> {
    return reportProgress(this.work, nodeId, req);
  }

  completeJob(nodeId: string, req: CompleteJobRequest, correlationId?: string): Promise<CompleteJobResponse> {
    return completeJob(this.work, nodeId, req, correlationId);
  }

  failJob(nodeId: string, req: FailJobRequest, correlationId?: string): Promise<FailJobResponse> {
    return failJob(this.work, nodeId, req, correlationId);
  }

  async claimJob(nodeId: string): Promise<ClaimJobResponse> {
    const [lease] = await this.leasing.claim(nodeId, 1);
    return create(ClaimJobResponseSchema, lease !== undefined ? { lease } : {});
  }

  // JobDispatch: the Session's job messages.
  async answer(nodeId: string, message: JobMessage): Promise<Reply["result"]> {
    switch (message.case) {
      case "jobProgress":
        return { case: "jobProgress", value: await this.reportProgress(nodeId, message.value) };
      case "jobComplete":
        return { case: "jobComplete", value: await this.completeJob(nodeId, message.value) };
      case "jobFail":
        return { case: "jobFail", value: await this.failJob(nodeId, message.value) };
    }
  }

  /**
   * A node opened a session here and said what it is running. Reconciles:
   * - a running job still leased to it: the lease is renewed and pushed again on the new session
   *   (the agent continues, and now reports on this session);
   * - a running job no longer leased to it (expired and re-queued, reclaimed, cancelled, done):
   *   the agent is told to stop it;
   * - a job leased to it before this session that it does not run: the agent lost it (restart,
   *   or the lease never arrived); it goes back to the queue at once instead of waiting to expire.
   * Then everything leasable is pushed.
   */
  async sessionOpened(nodeId: string, runningJobIds: string[], correlationId: string): Promise<void> {
    const { prisma, clock, settings, log } = this.work;
    const openedAt = clock.now();
    const running = new Set(
      runningJobIds
        .filter((id) => /^[0-9a-f-]{36}$/i.test(id))
        .map((id) => id.toLowerCase())
        .slice(0, 10_000),
    );
    const leased = await prisma.job.findMany({
      where: { nodeId, state: "leased" },
      include: { attempts: { orderBy: { attempt: "desc" }, take: 1, select: { attempt: true, leasedAt: true } } },
    });
    const kept = new Set<string>();
    for (const job of leased) {
      if (running.has(job.id)) {
        const expiresAt = leaseExpiry(clock.now(), settings.leaseDurationMs);
        const renewed = await prisma.job.updateMany({
          where: { id: job.id, state: "leased", attempt: job.attempt },
          data: { leaseExpiresAt: new Date(expiresAt) },
        });
        if (renewed.count !== 1) continue; // changed meanwhile: handled below as not leased
        kept.add(job.id);
        this.leasing.sendLease(
          nodeId,
          leaseOf({ id: job.id, attempt: job.attempt, leaseExpiresAt: expiresAt, spec: job.spec, orderingKey: job.orderingKey }),
        );
        if (job.cancelRequested) this.leasing.sendCancel(nodeId, job.id, job.attempt, job.cancelReason ?? "cancelled by operator");
        continue;
      }
      const leasedAt = job.attempts[0]?.attempt === job.attempt ? job.attempts[0].leasedAt.getTime() : 0;
      if (leasedAt < openedAt) await this.abandonLease(job, "agent reconnected without it", correlationId);
    }
    const unknown = [...running].filter((id) => !kept.has(id));
    if (unknown.length > 0) {
      const rows = await prisma.job.findMany({
        where: { id: { in: unknown }, nodeId },
        select: { id: true, state: true, attempt: true, failure: true },
      });
      for (const row of rows) {
        const why = row.state === "leased" ? "lease changed" : `job is ${row.state}`;
        this.leasing.sendCancel(nodeId, row.id, row.attempt, `${LEASE_LOST} (${why})`, true);
        log.info({ nodeId, jobId: row.id, state: row.state }, "agent runs a job it no longer holds: told to stop");
      }
    }
    this.leasing.kick(nodeId);
  }

  /** A lease its holder no longer has: decided as if it had expired now. */
  private async abandonLease(job: JobRow, why: string, correlationId?: string): Promise<void> {
    const now = this.work.clock.now();
    const outcome = afterLeaseExpiry({ ...recordOf(job), leaseExpiresAt: now }, now);
    if (outcome === null) return;
    const applied = await applyExpiry(this.work, job, outcome, now, { leaseExpiresAt: job.leaseExpiresAt }, correlationId);
    if (applied)
      this.work.log.info({ jobId: job.id, nodeId: job.nodeId, attempt: job.attempt, to: outcome.state }, `lease abandoned: ${why}`);
  }

  /** Another replica asks for this node's session: new work, or a cancellation. */
  fromCluster(event: Extract<ClusterEvent, { kind: "work" | "cancel" }>): void {
    if (event.kind === "work") this.leasing.kickHere(event.nodeId);
    else this.leasing.sendCancelHere(event.nodeId, event.jobId, event.attempt, event.reason, event.leaseLost);
  }

  // -------------------------------------------------------------------------------------------
  // Operator

  cancelJob(rawId: string, reason: string, correlationId: string, by: AuditActor): Promise<JobRow> {
    return cancelJob(this.work, rawId, reason, correlationId, by);
  }

  // -------------------------------------------------------------------------------------------
  // Sweeps (run periodically on every replica by the jobs loop server/start/jobs.ts starts; expiry and
  // reclaim only on the replica leading the reconcilers, server/cluster/leadership.ts)

  async sweep(leader = true): Promise<void> {
    if (leader) {
      await expireLeases(this.work);
      await reclaimUnreachable(this.work);
    }
    await this.leasing.pushToConnected();
  }
}
