// Leasing: handing a node's leasable jobs to it, in creation order and one at a time per ordering
// key, pushed down its Session on this replica. A claim is one conditional update on (id, state,
// attempt) plus its attempt row, so of replicas racing to lease one attempt exactly one wins.
// Leasing is only to nodes that are online by server-received heartbeats.
import { create } from "@bufbuild/protobuf";
import type { PrismaClient } from "../../gen/prisma/client.js";
import { JobCancelSchema, SessionResponseSchema } from "../../gen/proto/modelforge/agent/v1/agent_pb.js";
import type { JobLease } from "../../gen/proto/modelforge/jobs/v1/jobs_pb.js";
import type { Clock } from "../../common/clock.js";
import type { Logger } from "../observability/logger.js";
import type { NodeSessions } from "../node-sessions.js";
import type { LivenessTracker } from "../liveness/tracker.js";
import { claimLease, nextLeasable, type LeaseCandidate } from "./lease.js";
import { candidateOf, leaseOf } from "./codec.js";
import type { JobMetrics } from "../observability/metrics.js";

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

export interface LeasingDeps {
  prisma: PrismaClient;
  clock: Clock;
  log: Logger;
  liveness: LivenessTracker;
  sessions: Pick<NodeSessions, "get" | "isConnected" | "size" | "tellHolder">;
  leaseDurationMs: number;
  /** Aborted on shutdown: no new passes, and failures of passes cut short are not logged. */
  shutdown: AbortSignal;
  metrics?: JobMetrics | undefined;
}

export class Leasing {
  /** Nodes with a leasing pass running here; `again` asks it for one more pass. */
  private readonly passes = new Map<string, { again: boolean }>();
  private readonly finishedListeners: ((jobId: string) => void)[] = [];

  constructor(private readonly deps: LeasingDeps) {}

  /** Whether the node has a session on this replica. */
  connected(nodeId: string): boolean {
    return this.deps.sessions.isConnected(nodeId);
  }

  /** Whether a node may be given a lease now: online by server-received heartbeats. */
  private async nodeOnline(nodeId: string, now: number): Promise<boolean> {
    const node = await this.deps.prisma.node.findUnique({
      where: { id: nodeId },
      select: { id: true, lastHeartbeatAt: true, disabledAt: true, decommissionedAt: true },
    });
    return node !== null && this.deps.liveness.of(node, now) === "online";
  }

  /**
   * Leases up to `limit` of the node's leasable jobs, in creation order, and returns the leases.
   * Nothing when the node is not online. Each lease is one conditional update plus its attempt
   * row, in one transaction; a job someone else leased meanwhile is simply skipped.
   */
  async claim(nodeId: string, limit: number, onLease?: (lease: JobLease) => void): Promise<JobLease[]> {
    const { prisma, clock } = this.deps;
    // Pending work first: most passes (every session open) find none, and then need no liveness.
    const pending = await prisma.job.findMany({
      where: { nodeId, state: "pending" },
      orderBy: { seq: "asc" },
      take: PASS_LIMIT,
      select: { ...candidateSelect, spec: true, createdAt: true },
    });
    if (pending.length === 0 || !(await this.nodeOnline(nodeId, clock.now()))) return [];
    // Ordering keys may span nodes: the whole key's unfinished jobs decide who is first.
    const keys = [...new Set(pending.map((j) => j.orderingKey).filter((k): k is string => k !== null && k !== ""))];
    const keyed =
      keys.length === 0
        ? []
        : await prisma.job.findMany({
            where: { orderingKey: { in: keys }, state: { in: ["pending", "leased"] } },
            select: candidateSelect,
          });
    const byId = new Map<string, LeaseCandidate & { nodeId: string }>();
    for (const j of [...pending, ...keyed]) byId.set(j.id, { ...candidateOf(j), nodeId: j.nodeId });
    const specs = new Map(pending.map((j) => [j.id, j.spec]));
    const createdAt = new Map(pending.map((j) => [j.id, j.createdAt.getTime()]));
    const leases: JobLease[] = [];
    for (const id of nextLeasable([...byId.values()])) {
      if (leases.length >= limit) break;
      const job = byId.get(id)!;
      if (job.nodeId !== nodeId || !specs.has(id)) continue;
      const claimed = await this.claimOne(job, clock.now());
      if (claimed !== undefined) {
        const lease = leaseOf({
          id,
          attempt: claimed.attempt,
          leaseExpiresAt: claimed.leaseExpiresAt,
          spec: specs.get(id),
          orderingKey: job.orderingKey,
        });
        leases.push(lease);
        onLease?.(lease); // deliver each lease as soon as it is won, not after the whole pass
        if (claimed.attempt === 1) this.deps.metrics?.dispatched(clock.now() - createdAt.get(id)!);
      }
    }
    return leases;
  }

  private async claimOne(job: LeaseCandidate, now: number) {
    let next: ReturnType<typeof claimLease>;
    try {
      next = claimLease(job, now, this.deps.leaseDurationMs);
    } catch {
      return undefined; // not leasable after all (cancel requested, attempts used up)
    }
    const won = await this.deps.prisma.$transaction(async (tx) => {
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
    if (won) this.deps.metrics?.leaseGranted();
    return won ? next : undefined;
  }

  /**
   * Starts a leasing pass for the node without waiting for it: here when its session is here,
   * otherwise on the replica that holds it (told through the cluster bus).
   */
  kick(nodeId: string): void {
    if (this.deps.shutdown.aborted) return;
    if (!this.deps.sessions.isConnected(nodeId)) return this.deps.sessions.tellHolder({ kind: "work", nodeId });
    this.kickHere(nodeId);
  }

  /** A leasing pass for a node with a session here (another replica asked); nothing otherwise. */
  kickHere(nodeId: string): void {
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

  /** Pushes pending work to every node with a session here (covers jobs created on other replicas). */
  async pushToConnected(): Promise<void> {
    const { sessions, prisma } = this.deps;
    if (sessions.size === 0) return;
    const nodes = await prisma.job.groupBy({ by: ["nodeId"], where: { state: "pending", cancelRequested: false } });
    await Promise.all(nodes.filter((n) => sessions.isConnected(n.nodeId)).map((n) => this.pushLeasable(n.nodeId)));
  }

  /** Pushes a lease down the node's session here; false when it has none. */
  sendLease(nodeId: string, lease: JobLease): boolean {
    const session = this.deps.sessions.get(nodeId);
    if (session === undefined) return false;
    const sent = session.send(create(SessionResponseSchema, { message: { case: "lease", value: lease } }));
    if (sent) this.deps.log.debug({ nodeId, jobId: lease.jobId, attempt: lease.attempt }, "lease pushed");
    return sent;
  }

  /**
   * Tells the node's session to stop an attempt: here, or (false) through the replica that holds
   * it; the next progress reply says so too.
   */
  sendCancel(nodeId: string, jobId: string, attempt: number, reason: string, leaseLost = false): boolean {
    if (this.sendCancelHere(nodeId, jobId, attempt, reason, leaseLost)) return true;
    this.deps.sessions.tellHolder({ kind: "cancel", nodeId, jobId, attempt, reason, leaseLost });
    return false;
  }

  /** Tells the node's session here to stop an attempt; false when it has none. */
  sendCancelHere(nodeId: string, jobId: string, attempt: number, reason: string, leaseLost: boolean): boolean {
    const session = this.deps.sessions.get(nodeId);
    if (session === undefined) return false;
    return session.send(
      create(SessionResponseSchema, {
        message: { case: "cancel", value: create(JobCancelSchema, { jobId, attempt, reason, leaseLost }) },
      }),
    );
  }

  /** After a job finished: its ordering key's next job may now be leasable (perhaps on another node). */
  /** Called with each job's id once it has finished here (succeeded, failed for good, cancelled, reclaimed). */
  onFinished(listener: (jobId: string) => void): void {
    this.finishedListeners.push(listener);
  }

  async afterFinish(job: { id: string; nodeId: string; orderingKey: string | null }): Promise<void> {
    for (const listener of this.finishedListeners) listener(job.id);
    if (job.orderingKey === null || job.orderingKey === "") return;
    const head = await this.deps.prisma.job.findFirst({
      where: { orderingKey: job.orderingKey, state: { in: ["pending", "leased"] } },
      orderBy: { seq: "asc" },
      select: { nodeId: true, state: true },
    });
    if (head?.state === "pending") this.kick(head.nodeId);
  }

  /** Runs a follow-up without waiting; a failure is logged. */
  later(what: string, task: () => Promise<unknown>): void {
    task().catch((err: unknown) => {
      if (!this.deps.shutdown.aborted) this.deps.log.error({ task: what, error: (err as Error).message }, "job follow-up failed");
    });
  }
}
