// Typed jobs on the server: the engine behind `deps.jobs`. It owns leasing (pushed down the node's
// Session, or claimed by a unary ClaimJob), what happens when a session opens, and the follow-ups
// every other job module triggers; creation (./create.ts), agent reports (./reports.ts),
// cancellation (./cancel.ts) and the expiry and reclaim sweeps (./expiry.ts) are functions over
// the engine's JobContext.
//
// The rules are the pure functions in ../domain/lease.ts; these modules are the database around
// them. Every state change is a conditional update on (id, state, attempt[, lease expiry]), so
// several control-plane replicas on one PostgreSQL can run all of it at once: of two replicas
// racing to lease, renew, finish or expire one attempt, exactly one update matches.
//
// Leasing is only to nodes that are online (server-received heartbeats, ../domain/liveness.ts).
// A lease is pushed as soon as there is something leasable and the node has a session on this
// replica: when a job is created, when one finishes (its ordering key's next job), when a session
// opens, and on every sweep (which covers jobs created through another replica).
//
// A lease that lapses on a node that is not online is left in place rather than re-queued: the
// node may still be running it. Either the node comes back (its Hello lists what it runs and the
// lease is renewed, or it is told to stop) or, past the offline threshold plus the reclaim grace,
// the job is reclaimed: failed, never started again on its own.
import { create } from "@bufbuild/protobuf";
import type { Job as JobRow } from "../../gen/prisma/client.js";
import {
  ClaimJobResponseSchema,
  JobCancelSchema,
  SessionResponseSchema,
  type ClaimJobResponse,
  type CompleteJobRequest,
  type CompleteJobResponse,
  type FailJobRequest,
  type FailJobResponse,
  type Reply,
  type ReportJobProgressRequest,
  type ReportJobProgressResponse,
} from "../../gen/proto/modelforge/agent/v1/agent_pb.js";
import type { JobLease } from "../../gen/proto/modelforge/jobs/v1/jobs_pb.js";
import type { Deps } from "../app.js";
import { afterLeaseExpiry, claimLease, leaseExpiry, nextLeasable, LEASE_LOST, type LeaseCandidate } from "../domain/lease.js";
import { computeLiveness } from "../domain/liveness.js";
import { candidateOf, leaseOf, recordOf } from "./codec.js";
import type { JobContext } from "./context.js";
import type { JobDispatch, JobMessage } from "./dispatch.js";
import { cancelJob } from "./cancel.js";
import { createJob, type CreateJobInput } from "./create.js";
import { applyExpiry, expireLeases, reclaimUnreachable } from "./expiry.js";
import { completeJob, failJob, reportProgress } from "./reports.js";

/** Most pending jobs of one node looked at per leasing pass; the rest follow in later passes. */
const PASS_LIMIT = 200;

/** The columns a leasing pass reads. */
const candidateSelect = {
  id: true,
  nodeId: true,
  seq: true,
  state: true,
  attempt: true,
  maxAttempts: true,
  leaseExpiresAt: true,
  cancelRequested: true,
  orderingKey: true,
} as const;

export class JobEngine implements JobDispatch, JobContext {
  /** Nodes with a leasing pass running here; `again` asks it for one more pass. */
  private readonly passes = new Map<string, { again: boolean }>();

  constructor(private readonly depsOf: () => Deps) {}

  get deps(): Deps {
    return this.depsOf();
  }
  get prisma(): Deps["db"]["prisma"] {
    return this.deps.db.prisma;
  }

  // -------------------------------------------------------------------------------------------
  // Creating

  createJob(input: CreateJobInput): Promise<JobRow> {
    return createJob(this, input);
  }

  // -------------------------------------------------------------------------------------------
  // Leasing

  /** Whether a node may be given a lease now: online by server-received heartbeats. */
  private async nodeOnline(nodeId: string, now: number): Promise<boolean> {
    const node = await this.prisma.node.findUnique({
      where: { id: nodeId },
      select: { id: true, lastHeartbeatAt: true, disabledAt: true, decommissionedAt: true },
    });
    if (node === null) return false;
    return this.livenessOf(node, now) === "online";
  }

  livenessOf(
    node: { id: string; lastHeartbeatAt: Date | null; disabledAt?: Date | null; decommissionedAt?: Date | null },
    now: number,
  ) {
    const { config, heartbeats } = this.deps;
    return computeLiveness(
      {
        lastHeartbeatAt: heartbeats.lastHeartbeatAt(node.id, node.lastHeartbeatAt),
        disabled: (node.disabledAt ?? null) !== null,
        decommissioned: (node.decommissionedAt ?? null) !== null,
      },
      now,
      { staleAfterMs: config.staleAfterMs, offlineAfterMs: config.offlineAfterMs },
    );
  }

  /**
   * Leases up to `limit` of the node's leasable jobs, in creation order, and returns the leases.
   * Nothing when the node is not online. Each lease is one conditional update plus its attempt
   * row, in one transaction; a job someone else leased meanwhile is simply skipped.
   */
  async claim(nodeId: string, limit: number, onLease?: (lease: JobLease) => void): Promise<JobLease[]> {
    // Pending work first: most passes (every session open) find none, and then need no liveness.
    const pending = await this.prisma.job.findMany({
      where: { nodeId, state: "pending" },
      orderBy: { seq: "asc" },
      take: PASS_LIMIT,
      select: { ...candidateSelect, spec: true },
    });
    if (pending.length === 0 || !(await this.nodeOnline(nodeId, Date.now()))) return [];
    // Ordering keys may span nodes: the whole key's unfinished jobs decide who is first.
    const keys = [...new Set(pending.map((j) => j.orderingKey).filter((k): k is string => k !== null && k !== ""))];
    const keyed =
      keys.length === 0
        ? []
        : await this.prisma.job.findMany({
            where: { orderingKey: { in: keys }, state: { in: ["pending", "leased"] } },
            select: candidateSelect,
          });
    const byId = new Map<string, LeaseCandidate & { nodeId: string }>();
    for (const j of [...pending, ...keyed]) byId.set(j.id, { ...candidateOf(j), nodeId: j.nodeId });
    const specs = new Map(pending.map((j) => [j.id, j.spec]));
    const leases: JobLease[] = [];
    for (const id of nextLeasable([...byId.values()])) {
      if (leases.length >= limit) break;
      const job = byId.get(id)!;
      if (job.nodeId !== nodeId || !specs.has(id)) continue;
      const claimed = await this.claimOne(job, Date.now());
      if (claimed !== undefined) {
        const lease = leaseOf({ id, attempt: claimed.attempt, leaseExpiresAt: claimed.leaseExpiresAt, spec: specs.get(id), orderingKey: job.orderingKey });
        leases.push(lease);
        onLease?.(lease); // deliver each lease as soon as it is won, not after the whole pass
      }
    }
    return leases;
  }

  private async claimOne(job: LeaseCandidate, now: number) {
    let next;
    try {
      next = claimLease(job, now, this.deps.config.leaseDurationMs);
    } catch {
      return undefined; // not leasable after all (cancel requested, attempts used up)
    }
    const won = await this.prisma.$transaction(async (tx) => {
      const moved = await tx.job.updateMany({
        where: { id: job.id, state: "pending", attempt: job.attempt, cancelRequested: false },
        data: { state: "leased", attempt: next.attempt, leaseExpiresAt: new Date(next.leaseExpiresAt) },
      });
      if (moved.count !== 1) return false; // another pass or replica leased it first
      await tx.jobAttempt.create({
        data: { jobId: job.id, attempt: next.attempt, leasedAt: new Date(now), expiresAt: new Date(next.leaseExpiresAt) },
      });
      return true;
    });
    return won ? next : undefined;
  }

  /** Starts a leasing pass for a node with a session here, without waiting for it. */
  kick(nodeId: string): void {
    if (!this.deps.sessions.isConnected(nodeId) || this.deps.shutdown.aborted) return;
    this.pushLeasable(nodeId).catch((err: unknown) => {
      if (!this.deps.shutdown.aborted) this.deps.log.error({ nodeId, error: (err as Error).message }, "leasing pass failed");
    });
  }

  /**
   * Leases and pushes everything leasable to the node's session on this replica. Passes for one
   * node never overlap: a request during a pass makes the pass run once more instead.
   */
  async pushLeasable(nodeId: string): Promise<number> {
    const running = this.passes.get(nodeId);
    if (running !== undefined) {
      running.again = true;
      return 0;
    }
    const pass = { again: true };
    this.passes.set(nodeId, pass);
    let pushed = 0;
    try {
      while (pass.again && !this.deps.shutdown.aborted) {
        pass.again = false;
        if (!this.deps.sessions.isConnected(nodeId)) break;
        const leases = await this.claim(nodeId, PASS_LIMIT, (lease) => {
          if (this.sendLease(nodeId, lease)) pushed++;
          // Not delivered: the lease stays until the agent's next Hello (which does not list it)
          // returns it to the queue, or until it expires.
          else this.deps.log.warn({ nodeId, jobId: lease.jobId, attempt: lease.attempt }, "lease claimed but the session closed");
        });
        if (leases.length === PASS_LIMIT) pass.again = true;
      }
    } finally {
      this.passes.delete(nodeId);
    }
    return pushed;
  }

  sendLease(nodeId: string, lease: JobLease): boolean {
    const session = this.deps.sessions.get(nodeId);
    if (session === undefined) return false;
    const sent = session.send(create(SessionResponseSchema, { message: { case: "lease", value: lease } }));
    if (sent) this.deps.log.debug({ nodeId, jobId: lease.jobId, attempt: lease.attempt }, "lease pushed");
    return sent;
  }

  sendCancel(nodeId: string, jobId: string, attempt: number, reason: string, leaseLost = false): boolean {
    const session = this.deps.sessions.get(nodeId);
    if (session === undefined) return false;
    return session.send(
      create(SessionResponseSchema, {
        message: { case: "cancel", value: create(JobCancelSchema, { jobId, attempt, reason, leaseLost }) },
      }),
    );
  }

  /** After a job finished: its ordering key's next job may now be leasable (perhaps on another node). */
  async afterFinish(job: { nodeId: string; orderingKey: string | null }): Promise<void> {
    if (job.orderingKey === null || job.orderingKey === "") return;
    const head = await this.prisma.job.findFirst({
      where: { orderingKey: job.orderingKey, state: { in: ["pending", "leased"] } },
      orderBy: { seq: "asc" },
      select: { nodeId: true, state: true },
    });
    if (head?.state === "pending") this.kick(head.nodeId);
  }

  later(what: string, task: () => Promise<unknown>): void {
    task().catch((err: unknown) => {
      if (!this.deps.shutdown.aborted) this.deps.log.error({ task: what, error: (err as Error).message }, "job follow-up failed");
    });
  }

  // -------------------------------------------------------------------------------------------
  // Agent reports (the Session stream and the unary RPCs share these)

  reportProgress(nodeId: string, req: ReportJobProgressRequest): Promise<ReportJobProgressResponse> {
    return reportProgress(this, nodeId, req);
  }

  completeJob(nodeId: string, req: CompleteJobRequest, correlationId?: string): Promise<CompleteJobResponse> {
    return completeJob(this, nodeId, req, correlationId);
  }

  failJob(nodeId: string, req: FailJobRequest, correlationId?: string): Promise<FailJobResponse> {
    return failJob(this, nodeId, req, correlationId);
  }

  async claimJob(nodeId: string): Promise<ClaimJobResponse> {
    const [lease] = await this.claim(nodeId, 1);
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
    const openedAt = Date.now();
    const running = new Set(runningJobIds.filter((id) => /^[0-9a-f-]{36}$/i.test(id)).map((id) => id.toLowerCase()).slice(0, 10_000));
    const leased = await this.prisma.job.findMany({
      where: { nodeId, state: "leased" },
      include: { attempts: { orderBy: { attempt: "desc" }, take: 1, select: { attempt: true, leasedAt: true } } },
    });
    const kept = new Set<string>();
    for (const job of leased) {
      if (running.has(job.id)) {
        const expiresAt = leaseExpiry(Date.now(), this.deps.config.leaseDurationMs);
        const renewed = await this.prisma.job.updateMany({
          where: { id: job.id, state: "leased", attempt: job.attempt },
          data: { leaseExpiresAt: new Date(expiresAt) },
        });
        if (renewed.count !== 1) continue; // changed meanwhile: handled below as not leased
        kept.add(job.id);
        this.sendLease(nodeId, leaseOf({ id: job.id, attempt: job.attempt, leaseExpiresAt: expiresAt, spec: job.spec, orderingKey: job.orderingKey }));
        if (job.cancelRequested) this.sendCancel(nodeId, job.id, job.attempt, job.cancelReason ?? "cancelled by operator");
        continue;
      }
      const leasedAt = job.attempts[0]?.attempt === job.attempt ? job.attempts[0].leasedAt.getTime() : 0;
      if (leasedAt < openedAt) await this.abandonLease(job, "agent reconnected without it", correlationId);
    }
    const unknown = [...running].filter((id) => !kept.has(id));
    if (unknown.length > 0) {
      const rows = await this.prisma.job.findMany({ where: { id: { in: unknown }, nodeId }, select: { id: true, state: true, attempt: true, failure: true } });
      for (const row of rows) {
        const why = row.state === "leased" ? "lease changed" : `job is ${row.state}`;
        this.sendCancel(nodeId, row.id, row.attempt, `${LEASE_LOST} (${why})`, true);
        this.deps.log.info({ nodeId, jobId: row.id, state: row.state }, "agent runs a job it no longer holds: told to stop");
      }
    }
    this.kick(nodeId);
  }

  /** A lease its holder no longer has: decided as if it had expired now. */
  private async abandonLease(job: JobRow, why: string, correlationId?: string): Promise<void> {
    const now = Date.now();
    const outcome = afterLeaseExpiry({ ...recordOf(job), leaseExpiresAt: now }, now);
    if (outcome === null) return;
    const applied = await applyExpiry(this, job, outcome, now, { leaseExpiresAt: job.leaseExpiresAt }, correlationId);
    if (applied) this.deps.log.info({ jobId: job.id, nodeId: job.nodeId, attempt: job.attempt, to: outcome.state }, `lease abandoned: ${why}`);
  }

  // -------------------------------------------------------------------------------------------
  // Operator

  cancelJob(rawId: string, reason: string, correlationId: string): Promise<JobRow> {
    return cancelJob(this, rawId, reason, correlationId);
  }

  // -------------------------------------------------------------------------------------------
  // Sweeps (run periodically by ../sweeper/jobs.ts on every replica)

  expireLeases(now = Date.now()): Promise<number> {
    return expireLeases(this, now);
  }

  reclaimUnreachable(now = Date.now()): Promise<{ jobs: string[]; deployments: string[] }> {
    return reclaimUnreachable(this, now);
  }

  /** Pushes pending work to every node with a session here (covers jobs created on other replicas). */
  async pushToConnected(): Promise<void> {
    const { sessions } = this.deps;
    if (sessions.size === 0) return;
    const nodes = await this.prisma.job.groupBy({ by: ["nodeId"], where: { state: "pending", cancelRequested: false } });
    await Promise.all(nodes.filter((n) => sessions.isConnected(n.nodeId)).map((n) => this.pushLeasable(n.nodeId)));
  }

  async sweep(): Promise<void> {
    await this.expireLeases();
    await this.reclaimUnreachable();
    await this.pushToConnected();
  }
}

/** The engine behind `deps.jobs`. */
export function engineOf(deps: Pick<Deps, "jobs">): JobEngine {
  if (!(deps.jobs instanceof JobEngine)) throw new Error("jobs are not wired: deps.jobs is not a JobEngine");
  return deps.jobs;
}
