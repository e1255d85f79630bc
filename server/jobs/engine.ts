// Typed jobs on the server: creation, leasing (pushed down the node's Session, or claimed by a
// unary ClaimJob), progress and renewal, completion and failure, cancellation, lease expiry and
// reclaim of work on unreachable nodes.
//
// The rules are the pure functions in ../domain/lease.ts; this module is the database around
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
import { randomUUID } from "node:crypto";
import { Code, ConnectError } from "@connectrpc/connect";
import { create, toJson } from "@bufbuild/protobuf";
import { timestampFromMs } from "@bufbuild/protobuf/wkt";
import type { Job as JobRow, Prisma } from "../../gen/prisma/client.js";
import {
  ClaimJobResponseSchema,
  CompleteJobResponseSchema,
  FailJobResponseSchema,
  JobCancelSchema,
  ReportJobProgressResponseSchema,
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
import {
  JobFailureCode,
  JobProgressSchema,
  JobResultSchema,
  JobSpecSchema,
  type JobLease,
  type JobSpec,
} from "../../gen/proto/modelforge/jobs/v1/jobs_pb.js";
import { capabilityOfSpec } from "../../common/capabilities.js";
import type { Deps } from "../app.js";
import { recordAudit, operatorActor, nodeActor, systemActor } from "../audit/audit.js";
import { validateJobResult, validateJobSpec, validateProgress } from "../domain/job-spec.js";
import {
  afterFailure,
  afterLeaseExpiry,
  checkReport,
  claimLease,
  leaseExpiry,
  nextLeasable,
  LEASE_LOST,
  type LeaseCandidate,
} from "../domain/lease.js";
import { computeLiveness, reclaimDue } from "../domain/liveness.js";
import { candidateOf, failureCodeOf, failureJson, failureToJson, leaseOf, recordOf, specFromJson } from "./codec.js";
import type { JobDispatch, JobMessage } from "./dispatch.js";
import { jobIdOf, leaseLost, refuseReport, validating } from "./errors.js";
import { completeLeased, insertJob } from "./sql.js";

type Tx = Prisma.TransactionClient;

/** Reason recorded on work reclaimed from an unreachable node. */
export const RECLAIMED = "node unreachable: reclaimed";
/** Deployment states that describe something running on a node. */
const liveDeploymentStates = ["loading", "ready", "draining"];
/** Most pending jobs of one node looked at per leasing pass; the rest follow in later passes. */
const PASS_LIMIT = 200;
/** Most expired or reclaimable rows handled per sweep. */
const SWEEP_LIMIT = 500;
const MAX_ORDERING_KEY = 256;
const MAX_FAILURE_MESSAGE_BYTES = 1024;
const MAX_CANCEL_REASON = 256;

export interface CreateJobInput {
  nodeId: string;
  spec: JobSpec | undefined;
  orderingKey: string;
  /** 0: the configured default. */
  maxAttempts: number;
  correlationId: string;
}

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

export class JobEngine implements JobDispatch {
  /** Nodes with a leasing pass running here; `again` asks it for one more pass. */
  private readonly passes = new Map<string, { again: boolean }>();

  constructor(private readonly depsOf: () => Deps) {}

  private get deps(): Deps {
    return this.depsOf();
  }
  private get prisma() {
    return this.deps.db.prisma;
  }

  // -------------------------------------------------------------------------------------------
  // Creating

  async createJob(input: CreateJobInput): Promise<JobRow> {
    const { config } = this.deps;
    const spec = input.spec;
    if (spec === undefined) throw new ConnectError("spec: is required: exactly one capability must be set", Code.InvalidArgument);
    validating(() => validateJobSpec(spec, { approvedRoots: config.approvedRoots }));
    const capability = capabilityOfSpec(spec);
    const orderingKey = input.orderingKey === "" ? null : input.orderingKey;
    if (orderingKey !== null && (orderingKey.length > MAX_ORDERING_KEY || /[\u0000-\u001f\u007f]/.test(orderingKey))) {
      throw new ConnectError(`ordering_key: at most ${MAX_ORDERING_KEY} characters, no control characters`, Code.InvalidArgument);
    }
    const maxAttempts = input.maxAttempts === 0 ? config.defaultMaxAttempts : input.maxAttempts;
    if (!Number.isInteger(maxAttempts) || maxAttempts < 1 || maxAttempts > 100) {
      throw new ConnectError(`max_attempts: must be from 1 to 100 (0 for the default, ${config.defaultMaxAttempts})`, Code.InvalidArgument);
    }
    const nodeId = jobIdOf(input.nodeId, "node_id");
    const create = async (tx: Pick<Tx, "node" | "job" | "$queryRaw">): Promise<JobRow> => {
      const node = await tx.node.findUnique({
        where: { id: nodeId },
        select: { id: true, lastHeartbeatAt: true, disabledAt: true, disabledReason: true, decommissionedAt: true, capabilities: true },
      });
      if (node === null) throw new ConnectError(`node ${nodeId} not found`, Code.NotFound);
      if (node.decommissionedAt !== null) {
        throw new ConnectError(`node ${node.id} is decommissioned: it takes no jobs`, Code.FailedPrecondition);
      }
      if (node.disabledAt !== null) {
        throw new ConnectError(
          `node ${node.id} is disabled${node.disabledReason ? ` (${node.disabledReason})` : ""}: enable it before giving it jobs`,
          Code.FailedPrecondition,
        );
      }
      if (!node.capabilities.includes(capability)) {
        const has = node.capabilities.length > 0 ? node.capabilities.join(", ") : "none";
        throw new ConnectError(
          `node ${node.id} never advertised capability "${capability}"; it advertises: ${has}`,
          Code.FailedPrecondition,
        );
      }
      // The fast path: a job for a node that is online with a session here, and first in its
      // ordering key (if any), is leased in the same step that creates it.
      let leaseNow = this.deps.sessions.isConnected(node.id) && this.livenessOf(node, Date.now()) === "online";
      if (orderingKey !== null) {
        // Jobs of one key get their creation order (seq) in commit order: a later job's seq is
        // drawn only after an earlier one committed, so a leasing pass can never see a key's
        // later job without every earlier one.
        await tx.$queryRaw`SELECT 1 AS locked FROM (SELECT pg_advisory_xact_lock(hashtextextended(${`modelforge.job-key:${orderingKey}`}, 0))) AS l`;
        if (leaseNow) {
          const ahead = await tx.job.findFirst({ where: { orderingKey, state: { in: ["pending", "leased"] } }, select: { id: true } });
          leaseNow = ahead === null;
        }
      }
      const now = new Date();
      const leaseExpiresAt = leaseNow ? new Date(leaseExpiry(now.getTime(), config.leaseDurationMs)) : null;
      const row = {
        id: randomUUID(),
        nodeId: node.id,
        capability,
        spec: toJson(JobSpecSchema, spec),
        orderingKey,
        maxAttempts,
        leaseExpiresAt,
        now,
      };
      const seq = await insertJob(tx, {
        ...row,
        audit: {
          id: randomUUID(),
          actor: operatorActor,
          correlationId: input.correlationId,
          details: {
            nodeId: node.id,
            capability,
            maxAttempts: String(maxAttempts),
            ...(orderingKey !== null ? { orderingKey } : {}),
          },
        },
      });
      return {
        ...row,
        seq,
        spec: row.spec as Prisma.JsonValue,
        state: leaseNow ? "leased" : "pending",
        attempt: leaseNow ? 1 : 0,
        progress: null,
        result: null,
        failure: null,
        cancelRequested: false,
        cancelReason: null,
        createdAt: now,
        updatedAt: now,
        finishedAt: null,
      };
    };
    // A keyed job needs its advisory lock held across the check and the insert; an unkeyed one
    // is a read and one atomic statement.
    const job = orderingKey !== null ? await this.prisma.$transaction((tx) => create(tx)) : await create(this.prisma);
    if (job.state === "leased" && job.leaseExpiresAt !== null) {
      const lease = leaseOf({ id: job.id, attempt: job.attempt, leaseExpiresAt: job.leaseExpiresAt.getTime(), spec, orderingKey: job.orderingKey });
      if (!this.sendLease(job.nodeId, lease)) {
        this.deps.log.warn({ nodeId: job.nodeId, jobId: job.id }, "lease created but the session closed");
      }
    } else {
      this.kick(job.nodeId);
    }
    return job;
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

  private livenessOf(
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
    const now = Date.now();
    if (!(await this.nodeOnline(nodeId, now))) return [];
    const pending = await this.prisma.job.findMany({
      where: { nodeId, state: "pending" },
      orderBy: { seq: "asc" },
      take: PASS_LIMIT,
      select: { ...candidateSelect, spec: true },
    });
    if (pending.length === 0) return [];
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

  private sendLease(nodeId: string, lease: JobLease): boolean {
    const session = this.deps.sessions.get(nodeId);
    if (session === undefined) return false;
    const sent = session.send(create(SessionResponseSchema, { message: { case: "lease", value: lease } }));
    if (sent) this.deps.log.debug({ nodeId, jobId: lease.jobId, attempt: lease.attempt }, "lease pushed");
    return sent;
  }

  private sendCancel(nodeId: string, jobId: string, attempt: number, reason: string, leaseLost = false): boolean {
    const session = this.deps.sessions.get(nodeId);
    if (session === undefined) return false;
    return session.send(
      create(SessionResponseSchema, {
        message: { case: "cancel", value: create(JobCancelSchema, { jobId, attempt, reason, leaseLost }) },
      }),
    );
  }

  /** After a job finished: its ordering key's next job may now be leasable (perhaps on another node). */
  private async afterFinish(job: { nodeId: string; orderingKey: string | null }): Promise<void> {
    if (job.orderingKey === null || job.orderingKey === "") return;
    const head = await this.prisma.job.findFirst({
      where: { orderingKey: job.orderingKey, state: { in: ["pending", "leased"] } },
      orderBy: { seq: "asc" },
      select: { nodeId: true, state: true },
    });
    if (head?.state === "pending") this.kick(head.nodeId);
  }

  private later(what: string, task: () => Promise<unknown>): void {
    task().catch((err: unknown) => {
      if (!this.deps.shutdown.aborted) this.deps.log.error({ task: what, error: (err as Error).message }, "job follow-up failed");
    });
  }

  // -------------------------------------------------------------------------------------------
  // Agent reports (the Session stream and the unary RPCs share these)

  /** The job, if it is this node's: not_found for an unknown id, permission_denied for another node's. */
  private async ownJob(nodeId: string, rawId: string): Promise<JobRow> {
    const id = jobIdOf(rawId);
    const job = await this.prisma.job.findUnique({ where: { id } });
    if (job === null) throw new ConnectError(`job ${id} not found`, Code.NotFound);
    if (job.nodeId !== nodeId) throw new ConnectError(`job ${id} is not this node's job`, Code.PermissionDenied);
    return job;
  }

  async reportProgress(nodeId: string, req: ReportJobProgressRequest): Promise<ReportJobProgressResponse> {
    const job = await this.ownJob(nodeId, req.jobId);
    const now = Date.now();
    const check = checkReport(recordOf(job), req.attempt, now);
    if (!check.ok) refuseReport(check);
    const progress = req.progress;
    if (progress !== undefined) validating(() => validateProgress(progress));
    const expiresAt = leaseExpiry(now, this.deps.config.leaseDurationMs);
    const renewed = await this.prisma.job.updateMany({
      where: { id: job.id, state: "leased", attempt: req.attempt, leaseExpiresAt: { gt: new Date(now) } },
      data: {
        leaseExpiresAt: new Date(expiresAt),
        ...(progress !== undefined ? { progress: toJson(JobProgressSchema, progress) as Prisma.InputJsonValue } : {}),
      },
    });
    if (renewed.count !== 1) throw leaseLost(`attempt ${req.attempt} changed while renewing`);
    return create(ReportJobProgressResponseSchema, { expiresAt: timestampFromMs(expiresAt), cancelRequested: job.cancelRequested });
  }

  async completeJob(nodeId: string, req: CompleteJobRequest, correlationId?: string): Promise<CompleteJobResponse> {
    const job = await this.ownJob(nodeId, req.jobId);
    const now = Date.now();
    const check = checkReport(recordOf(job), req.attempt, now);
    if (!check.ok) refuseReport(check);
    const result = req.result;
    if (result === undefined) throw new ConnectError("result: is required", Code.InvalidArgument);
    validating(() => validateJobResult(specFromRow(job), result));
    if (!(await completeLeased(this.prisma, job.id, req.attempt, toJson(JobResultSchema, result), new Date(now)))) {
      throw leaseLost(`attempt ${req.attempt} changed while completing`);
    }
    this.deps.log.info({ jobId: job.id, nodeId, attempt: req.attempt, correlationId }, "job succeeded");
    this.later("next in ordering key", () => this.afterFinish(job));
    return create(CompleteJobResponseSchema);
  }

  async failJob(nodeId: string, req: FailJobRequest, correlationId?: string): Promise<FailJobResponse> {
    const job = await this.ownJob(nodeId, req.jobId);
    const now = Date.now();
    const check = checkReport(recordOf(job), req.attempt, now);
    if (!check.ok) refuseReport(check);
    const failure = req.failure;
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
    await this.prisma.$transaction(async (tx) => {
      const moved = await tx.job.updateMany({
        where: { id: job.id, state: "leased", attempt: req.attempt, leaseExpiresAt: { gt: new Date(now) } },
        data: {
          state: next.state,
          failure: failureToJson(failure),
          leaseExpiresAt: null,
          ...(next.state === "pending" ? {} : { finishedAt: new Date(now) }),
        },
      });
      if (moved.count !== 1) throw leaseLost(`attempt ${req.attempt} changed while failing`);
      await endAttempt(tx, job.id, req.attempt, cancelled ? "cancelled" : "failed", now);
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
    });
    this.deps.log.info(
      { jobId: job.id, nodeId, attempt: req.attempt, code: JobFailureCode[failure.code], state: next.state, correlationId },
      next.willRetry ? "job failed; will retry" : "job failed",
    );
    if (next.state === "pending") this.kick(nodeId);
    else this.later("next in ordering key", () => this.afterFinish(job));
    return create(FailJobResponseSchema, { willRetry: next.willRetry });
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
    const applied = await this.applyExpiry(job, outcome, now, { leaseExpiresAt: job.leaseExpiresAt }, correlationId);
    if (applied) this.deps.log.info({ jobId: job.id, nodeId: job.nodeId, attempt: job.attempt, to: outcome.state }, `lease abandoned: ${why}`);
  }

  // -------------------------------------------------------------------------------------------
  // Operator

  async cancelJob(rawId: string, reason: string, correlationId: string): Promise<JobRow> {
    const id = jobIdOf(rawId);
    if (reason.length > MAX_CANCEL_REASON) throw new ConnectError(`reason: at most ${MAX_CANCEL_REASON} characters`, Code.InvalidArgument);
    const why = reason.trim() || "cancelled by operator";
    for (let tries = 0; tries < 5; tries++) {
      const job = await this.prisma.job.findUnique({ where: { id } });
      if (job === null) throw new ConnectError(`job ${id} not found`, Code.NotFound);
      if (job.state === "cancelled") return job;
      if (job.state === "succeeded" || job.state === "failed") {
        throw new ConnectError(`job ${id} already ${job.state}; nothing to cancel`, Code.FailedPrecondition);
      }
      const now = new Date();
      const pending = job.state === "pending";
      const applied = await this.prisma.$transaction(async (tx) => {
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
          actor: operatorActor,
          action: "job.cancel_requested",
          targetType: "job",
          targetId: id,
          correlationId,
          details: { reason: why, state: job.state, attempt: String(job.attempt) },
        });
        return true;
      });
      if (!applied) continue; // the job moved meanwhile; decide again
      if (pending) this.later("next in ordering key", () => this.afterFinish(job));
      else this.sendCancel(job.nodeId, id, job.attempt, why); // elsewhere: the next progress reply says so
      return (await this.prisma.job.findUnique({ where: { id } }))!;
    }
    throw new ConnectError(`job ${id} kept changing; try again`, Code.Aborted);
  }

  // -------------------------------------------------------------------------------------------
  // Sweeps (run periodically by ../sweeper/jobs.ts on every replica)

  /**
   * Leases that lapsed without renewal on nodes that are online: back to the queue with the next
   * attempt, or failed when attempts are exhausted, or cancelled when a cancel was requested.
   * A lapsed lease on a node that is not online is left alone: the node may still be running it,
   * and either it comes back (and reports what it runs) or its work is reclaimed.
   */
  async expireLeases(now = Date.now()): Promise<number> {
    // Lapsed leases on nodes that are not online stay (possibly many, for a long while), so they
    // are filtered out before the batch is cut, or they would starve the others.
    const lapsed = await this.prisma.job.findMany({
      where: { state: "leased", leaseExpiresAt: { lte: new Date(now) } },
      orderBy: { leaseExpiresAt: "asc" },
      select: { id: true, node: { select: { id: true, lastHeartbeatAt: true } } },
      take: 20 * SWEEP_LIMIT,
    });
    const due = lapsed.filter((j) => this.livenessOf(j.node, now) === "online").slice(0, SWEEP_LIMIT);
    if (due.length === 0) return 0;
    const rows = await this.prisma.job.findMany({ where: { id: { in: due.map((j) => j.id) } } });
    let changed = 0;
    for (const job of rows) {
      const outcome = afterLeaseExpiry(recordOf(job), now);
      if (outcome === null) continue;
      if (await this.applyExpiry(job, outcome, now, { leaseExpiresAt: { lte: new Date(now) } })) {
        changed++;
        this.deps.log.info({ jobId: job.id, nodeId: job.nodeId, attempt: job.attempt, to: outcome.state }, "lease expired");
      }
    }
    return changed;
  }

  private async applyExpiry(
    job: JobRow,
    outcome: NonNullable<ReturnType<typeof afterLeaseExpiry>>,
    now: number,
    leaseCondition: Prisma.JobWhereInput,
    correlationId?: string,
  ): Promise<boolean> {
    const applied = await this.prisma.$transaction(async (tx) => {
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
    if (outcome.state === "pending") this.kick(job.nodeId);
    else this.later("next in ordering key", () => this.afterFinish(job));
    return true;
  }

  /**
   * Work on nodes unreachable for longer than the offline threshold plus the reclaim grace:
   * leased jobs and live deployments are marked failed ("node unreachable: reclaimed") and
   * audited. Nothing is started elsewhere: a partitioned node may still be running it. Pending
   * jobs of such a node stay pending; they are leased only once it is online again.
   */
  async reclaimUnreachable(now = Date.now()): Promise<{ jobs: string[]; deployments: string[] }> {
    const { config, heartbeats } = this.deps;
    // The persisted heartbeat is never newer than the one in memory, so a node it shows as recent
    // is not due; only the others are looked at further.
    const nodes = await this.prisma.node.findMany({
      where: {
        decommissionedAt: null,
        lastHeartbeatAt: { lt: new Date(now - config.offlineAfterMs - config.reclaimGraceMs) },
        OR: [{ jobs: { some: { state: "leased" } } }, { deployments: { some: { state: { in: liveDeploymentStates } } } }],
      },
      select: { id: true, lastHeartbeatAt: true },
      take: SWEEP_LIMIT,
    });
    const reclaimed = { jobs: [] as string[], deployments: [] as string[] };
    for (const node of nodes) {
      const last = heartbeats.lastHeartbeatAt(node.id, node.lastHeartbeatAt);
      if (!reclaimDue(last, now, config.offlineAfterMs, config.reclaimGraceMs)) continue;
      const details = { reason: RECLAIMED, nodeId: node.id, unreachableForMs: String(now - (last ?? now)) };
      const jobs = await this.prisma.job.findMany({ where: { nodeId: node.id, state: "leased" }, take: SWEEP_LIMIT });
      for (const job of jobs) {
        const done = await this.prisma.$transaction(async (tx) => {
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
        this.deps.log.warn({ jobId: job.id, nodeId: node.id, attempt: job.attempt }, "job reclaimed: node unreachable");
        this.later("next in ordering key", () => this.afterFinish(job));
      }
      const deployments = await this.prisma.deployment.findMany({
        where: { nodeId: node.id, state: { in: liveDeploymentStates } },
        select: { id: true, state: true },
      });
      for (const d of deployments) {
        const done = await this.prisma.$transaction(async (tx) => {
          const moved = await tx.deployment.updateMany({
            where: { id: d.id, state: d.state },
            data: { state: "failed", failureReason: RECLAIMED },
          });
          if (moved.count !== 1) return false;
          await recordAudit(tx, {
            actor: systemActor,
            action: "deployment.reclaimed",
            targetType: "deployment",
            targetId: d.id,
            details: { ...details, from: d.state },
          });
          return true;
        });
        if (!done) continue;
        reclaimed.deployments.push(d.id);
        this.deps.log.warn({ deploymentId: d.id, nodeId: node.id }, "deployment reclaimed: node unreachable");
      }
    }
    return reclaimed;
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

async function endAttempt(tx: Tx, jobId: string, attempt: number, outcome: string, now: number): Promise<void> {
  await tx.jobAttempt.updateMany({ where: { jobId, attempt, endedAt: null }, data: { endedAt: new Date(now), outcome } });
}

function specFromRow(job: JobRow): JobSpec {
  return specFromJson(job.spec);
}
