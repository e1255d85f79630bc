// The deployment controller: each pass reads deployments, their instances (one per replica slot and
// revision), their nodes' liveness and the jobs of their steps, asks ./rules.ts what happens next,
// and applies it with conditional writes (so several control-plane replicas may run it at once: of
// two racing on one instance, one write matches). Jobs are created under an id claimed on the
// instance first, so a step never runs twice; a replica is placed under locks on its deployment's
// row and its node's, and only if nothing was placed on the node since the snapshot it was chosen
// from, so no node takes more than its room or max_per_node.
import { randomUUID } from "node:crypto";
import { Code, ConnectError } from "@connectrpc/connect";
import type { Deployment, DeploymentInstance, Job, Prisma, PrismaClient } from "../../gen/prisma/client.js";
import type { Clock } from "../../common/clock.js";
import type { Logger } from "../observability/logger.js";
import type { CreateJobInput } from "../jobs/create.js";
import { isDatabaseUnavailable } from "../db/availability.js";
import { failureJson } from "../jobs/codec.js";
import { JobFailureCode } from "../../gen/proto/modelforge/jobs/v1/jobs_pb.js";
import { recordAudit, systemActor } from "../audit/audit.js";
import {
  failureText,
  overallPhase,
  type OverallPhase,
  plan,
  type Action,
  type Desired,
  type InstanceView,
  type JobOutcome,
  type Phase,
  type Step,
} from "./rules.js";
import { assignedGpus, capabilityOfStep, specOfStep, unloadOnNode } from "./specs.js";
import { unsettledDeployments } from "./unsettled.js";
import { gpuLoss, labelLoss, nodeLoss, type LossBounds } from "./node-loss.js";
import { HOLDING, holdingKey, placeReplica, replicaParallelOf } from "./placement-snapshot.js";
import type { EvictionDeps } from "./eviction.js";
import type { EvictionMetrics } from "../observability/metrics.js";
import { evictionReason, type EvictionCandidate } from "./eviction-rules.js";
import { scaleTo } from "./autoscaler.js";

export interface DeploymentControllerDeps {
  prisma: PrismaClient;
  clock: Clock;
  log: Logger;
  jobs: { createJob(input: CreateJobInput): Promise<unknown> };
  /** Tells the other replicas a deployment's routing changed here (the cluster bus). */
  announce?: (deploymentId: string) => void;
  /** When a node counts as lost to its replicas (./node-loss.ts); defaults suit tests that never lose one. */
  loss?: LossBounds;
  /** Where idle replicas are found to evict for one that fits no node; without it, none is evicted. */
  eviction?: Omit<EvictionDeps, "prisma" | "clock">;
  metrics?: EvictionMetrics;
}

type WithInstances = Deployment & { instances: DeploymentInstance[] };

/**
 * What applying an action did: stored its change, had nothing to store (no node fits), or lost its
 * conditional write to a concurrent pass (the sweep, another control plane), whose rows are then
 * read again: that pass may stop before the next step (a replica it created, not yet placed).
 */
type Applied = "changed" | "idle" | "raced";

/** Of a round's actions: changed if any did, else raced if any lost a write, else idle. */
const roundOf = (applied: Applied[]): Applied => (applied.includes("changed") ? "changed" : applied.includes("raced") ? "raced" : "idle");

/** A conditional write that matched its row changed it; one that matched none lost to another pass. */
const wrote = (matched: boolean): Applied => (matched ? "changed" : "raced");

/** Pending replicas whose latest eviction is remembered (a deleted deployment's are never placed). */
const evictionsRemembered = 10_000;

/** Deployments read (with their instances) per statement of a pass. */
const sweepBatch = 500;

function outcomeOf(job: Pick<Job, "state" | "result" | "failure"> | undefined): JobOutcome {
  if (job === undefined) return { state: "missing" };
  switch (job.state) {
    case "pending":
    case "leased":
      return { state: job.state };
    case "succeeded": {
      const result = job.result as { deploymentLoad?: { runtimeId?: string } } | null;
      const runtimeId = result?.deploymentLoad?.runtimeId;
      return runtimeId ? { state: "succeeded", runtimeId } : { state: "succeeded" };
    }
    default: {
      const reason = failureText(job.failure as { code?: string; message?: string } | null) || job.state;
      return { state: job.state === "cancelled" ? "cancelled" : "failed", reason };
    }
  }
}

export class DeploymentController {
  private readonly listeners = new Set<(deploymentId: string) => void>();

  private readonly loss: LossBounds;

  /**
   * Per pending replica ("deployment/revision/replica") that evicted another to make room:
   * Infinity while that eviction runs, then the pass count when it ended. Passes over one
   * deployment run at once (the sweep beside an event's), and one that read the fleet before the
   * victim was draining would evict a second replica for the same room.
   */
  private readonly evictedFor = new Map<string, number>();
  private passes = 0;

  constructor(private readonly deps: DeploymentControllerDeps) {
    this.loss = deps.loss ?? { staleAfterMs: 30_000, replaceAfterMs: 10_000 };
  }

  /** Told whenever a deployment's routing may have changed, here or (through changedElsewhere) on another replica. */
  onChange(listener: (deploymentId: string) => void): () => void {
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
  }

  /** Another replica changed a deployment's routing (a drain there stops new invokes here too). */
  changedElsewhere(deploymentId: string): void {
    for (const listener of this.listeners) listener(deploymentId);
  }

  /** One pass over every deployment not at rest (./unsettled.ts). */
  async sweep(): Promise<void> {
    const ids = await unsettledDeployments(this.deps.prisma, this.deps.clock.now(), this.loss);
    for (let i = 0; i < ids.length; i += sweepBatch) {
      const rows = await this.deps.prisma.deployment.findMany({
        where: { id: { in: ids.slice(i, i + sweepBatch) } },
        include: { instances: true },
      });
      for (const d of rows) await this.reconcileRow(d);
    }
  }

  /** Passes over one deployment until nothing more happens at once (a few moves at most). */
  async reconcile(deploymentId: string): Promise<void> {
    // A change made outside a pass (a node's Hello found its runtime lost) is stored as the state
    // before this pass starts a step: a node could otherwise finish that step while the
    // deployment still reads as it was (READY while its only replica reloads).
    if (await this.refreshState(deploymentId)) this.changed(deploymentId);
    const d = await this.deps.prisma.deployment.findUnique({ where: { id: deploymentId }, include: { instances: true } });
    if (d === null) return;
    await this.reconcileRow(d);
    // The caller (an operator's request, a job's end) may have changed what the state follows
    // from (a ready instance of a drained deployment is draining) while this pass lost every
    // write to a concurrent one (the sweep) that has not stored its state yet: the state is
    // settled here before the caller answers, not by whichever pass comes next.
    if (await this.refreshState(deploymentId)) this.changed(deploymentId);
  }

  private async reconcileRow(first: WithInstances): Promise<void> {
    let d: WithInstances | null = first;
    for (let round = 0; round < 6 && d !== null; round++) {
      if ((await this.step(d)) === "idle") break;
      d = await this.deps.prisma.deployment.findUnique({ where: { id: d.id }, include: { instances: true } });
    }
  }

  /** Plans and applies one round. */
  private async step(d: WithInstances): Promise<Applied> {
    const { prisma, clock } = this.deps;
    const jobIds = d.instances.map((i) => i.jobId).filter((id): id is string => id !== null);
    const jobs =
      jobIds.length === 0
        ? []
        : await prisma.job.findMany({ where: { id: { in: jobIds } }, select: { id: true, state: true, result: true, failure: true } });
    const byId = new Map(jobs.map((j) => [j.id, j]));
    const nodeIds = [...new Set(d.instances.map((i) => i.nodeId).filter((n): n is string => n !== null))];
    const nodes =
      nodeIds.length === 0
        ? []
        : await prisma.node.findMany({
            where: { id: { in: nodeIds } },
            select: { id: true, disabledAt: true, decommissionedAt: true, lastHeartbeatAt: true, sessionReplica: true, labels: true },
          });
    const updating = new Set(
      nodeIds.length === 0
        ? []
        : (
            await prisma.agentRolloutNode.findMany({
              where: { nodeId: { in: nodeIds }, state: "updating", rollout: { state: { in: ["running", "paused"] } } },
              select: { nodeId: true },
            })
          ).map((r) => r.nodeId),
    );
    const nodeById = new Map(nodes.map((n) => [n.id, { ...n, updating: updating.has(n.id) }]));
    const missingGpus =
      nodeIds.length === 0 || d.instances.every((i) => i.gpuUuids.length === 0)
        ? []
        : await prisma.gpu.findMany({ where: { nodeId: { in: nodeIds }, state: "missing" }, select: { nodeId: true, uuid: true } });
    const missingOn = (nodeId: string) => new Set(missingGpus.filter((g) => g.nodeId === nodeId).map((g) => g.uuid));
    const now = clock.now();
    const selector = (d.selector ?? {}) as Record<string, string>;
    const labelsLost = (nodeId: string) =>
      labelLoss(nodeId, (nodeById.get(nodeId)?.labels ?? {}) as Record<string, unknown>, selector, d.nodeId !== null);
    const views: InstanceView[] = d.instances.map((i) => ({
      revision: i.revision,
      replica: i.replica,
      restarts: i.restarts,
      served: i.runtimeId !== null,
      ...(i.nodeId !== null
        ? lostView(
            nodeLoss(nodeById.get(i.nodeId), now, this.loss),
            gpuLoss(i.nodeId, i.gpuUuids, missingOn(i.nodeId)) ?? labelsLost(i.nodeId),
          )
        : {}),
      phase: i.phase as Phase,
      step: i.step as Step | null,
      jobId: i.jobId,
      claimedAt: i.claimedAt?.getTime() ?? null,
      ...(i.jobId !== null ? { job: outcomeOf(byId.get(i.jobId)) } : {}),
    }));
    const view = { desired: d.desired as Desired, revision: d.revision, replicas: d.replicas, surge: d.surgeForNodeId === null ? 0 : 1 };
    const actions = plan(view, views, now);
    const applied: Applied[] = [];
    for (const action of actions) {
      try {
        applied.push(await this.apply(d, action));
      } catch (err) {
        if (isDatabaseUnavailable(err)) throw err;
        this.deps.log.error({ err, deploymentId: d.id, action: action.kind }, "deployment step failed");
      }
    }
    const round = roundOf(applied);
    if (round === "changed") {
      await this.refreshState(d.id);
      this.changed(d.id);
    }
    return round;
  }

  /** Routing may have changed: the relay here and the other replicas are told. */
  private changed(deploymentId: string): void {
    for (const listener of this.listeners) listener(deploymentId);
    this.deps.announce?.(deploymentId);
  }

  private async apply(d: WithInstances, action: Action): Promise<Applied> {
    const { prisma, clock } = this.deps;
    const now = new Date(clock.now());
    switch (action.kind) {
      case "create": {
        return prisma.$transaction(async (tx) => {
          await holdDeployment(tx, d.id);
          const made = await tx.deploymentInstance.createMany({
            data: [
              {
                deploymentId: d.id,
                revision: action.revision,
                replica: action.replica,
                nodeId: null,
                runtimeProfile: d.runtimeProfile,
                repository: d.repository,
                commit: d.commit,
                modelFile: d.modelFile,
                phase: "pending",
                step: null,
                updatedAt: now,
              },
            ],
            skipDuplicates: true,
          });
          if (made.count !== 1) return "raced";
          const what = `revision ${action.revision} of ${d.repository}@${d.commit}`;
          await event(tx, d, { revision: action.revision, replica: action.replica, nodeId: null }, null, "pending", what, now);
          return "changed";
        });
      }
      case "place":
        return this.place(d, instanceOf(d, action), now);
      case "move":
        return this.move(d, instanceOf(d, action), action, now);
      case "start":
        return this.start(d, instanceOf(d, action), action.step, now);
      case "remove": {
        const removed = await prisma.$transaction(async (tx) => {
          const gone = await tx.deployment.deleteMany({ where: { id: d.id, desired: "deleted" } });
          if (gone.count === 1) {
            await recordAudit(
              tx,
              { actor: systemActor, action: "deployment.removed", targetType: "deployment", targetId: d.id, details: { name: d.name } },
              now,
            );
          }
          return gone.count === 1;
        });
        if (removed) this.deps.log.info({ deploymentId: d.id, name: d.name }, "deployment removed");
        return wrote(removed);
      }
    }
  }

  private async move(d: WithInstances, i: DeploymentInstance, action: Extract<Action, { kind: "move" }>, now: Date): Promise<Applied> {
    const moved = await this.deps.prisma.$transaction(async (tx) => {
      await holdDeployment(tx, d.id);
      const moved = await tx.deploymentInstance.updateMany({
        where: {
          deploymentId: d.id,
          revision: i.revision,
          replica: i.replica,
          phase: i.phase,
          step: i.step,
          jobId: i.jobId,
          nodeId: i.nodeId,
        },
        data: {
          phase: action.to,
          step: action.step,
          jobId: null,
          claimedAt: null,
          updatedAt: now,
          ...(action.reason !== undefined ? { reason: action.reason } : {}),
          ...(action.runtimeId !== undefined ? { runtimeId: action.runtimeId } : {}),
          ...(action.to === "ready" ? { restarts: 0 } : {}),
          ...(action.unplace === true ? { nodeId: null, gpuUuids: [], gpuIndices: [] } : {}),
          ...(action.restart === true ? { restarts: { increment: 1 } } : {}),
        },
      });
      if (moved.count !== 1) return false;
      if (action.to !== i.phase) await event(tx, d, i, i.phase, action.to, action.reason ?? null, now);
      // A step still waiting for the node it is leaving would otherwise run there when it returns.
      if (action.unplace === true && i.jobId !== null) await cancelPending(tx, i.jobId, action.reason ?? "replica moved", now);
      if (action.unplace === true && i.nodeId !== null) {
        await replicaAudit(tx, "deployment.replica_unplaced", d, i, { nodeId: i.nodeId, reason: action.reason ?? "" }, now);
      }
      return true;
    });
    // After the move is stored: a load placed on the same node later is ordered after this unload.
    if (moved && action.stopOnNode === true && i.nodeId !== null) {
      await this.deps.jobs.createJob(unloadOnNode(i.nodeId, { deploymentId: d.id, revision: i.revision, replica: i.replica }));
    }
    return wrote(moved);
  }

  /**
   * Drains an idle replica of another deployment to make room for one of `d`: its deployment wants
   * one replica fewer (the slot a scale-down removes is the one chosen), audited with the reason.
   */
  private async evict(victim: EvictionCandidate, d: Deployment): Promise<void> {
    const reason = evictionReason(victim, d.name);
    const evicted = await scaleTo(
      { prisma: this.deps.prisma, clock: this.deps.clock, log: this.deps.log, reconcile: (id) => this.reconcile(id) },
      { id: victim.deploymentId, name: victim.name },
      victim.replica + 1,
      victim.replica,
      reason,
      "deployment.evicted",
    );
    if (evicted) this.deps.metrics?.evicted("make_room");
  }

  /**
   * Gives a pending replica a node: the placement rules choose over a snapshot of the fleet, then,
   * under locks on the deployment's row and the node's, the choice is kept only if no replica was
   * placed on that node since the snapshot (a sibling, or another deployment's, from this control
   * plane or another). Nothing fits: the reason is kept on the replica for operators, and the next
   * pass (or a change in the fleet) tries again.
   */
  private async place(d: WithInstances, i: DeploymentInstance, now: Date): Promise<Applied> {
    const { prisma } = this.deps;
    const key = holdingKey(i);
    const began = ++this.passes;
    const profile = await prisma.runtimeProfile.findUnique({ where: { name: i.runtimeProfile }, select: { engine: true } });
    const placement =
      profile === null
        ? { pending: `runtime profile "${i.runtimeProfile}" not found` }
        : await placeReplica(
            {
              prisma,
              clock: this.deps.clock,
              loss: this.loss,
              ...(this.deps.eviction !== undefined ? { eviction: { prisma, clock: this.deps.clock, ...this.deps.eviction } } : {}),
            },
            {
              deploymentId: d.id,
              revision: i.revision,
              nodeId: d.nodeId ?? "",
              maxPerNode: d.maxPerNode,
              selector: (d.selector ?? {}) as { [key: string]: string },
              engine: profile.engine,
              capabilities: Object.values(capabilityOfStep),
              runtimeProfile: i.runtimeProfile,
              repository: i.repository,
              commit: i.commit,
              modelFile: i.modelFile,
              targetRoot: d.targetRoot,
              priority: d.priority,
            },
          );
    if ("evict" in placement) {
      // Another pass evicted for this replica while this one read the fleet: its view is stale.
      if ((this.evictedFor.get(key) ?? 0) >= began) return "idle";
      this.evictedFor.set(key, Number.POSITIVE_INFINITY);
      try {
        await this.evict(placement.evict, d);
      } finally {
        this.evictedFor.set(key, ++this.passes);
        if (this.evictedFor.size > evictionsRemembered) this.evictedFor.delete(this.evictedFor.keys().next().value!);
      }
    }
    if ("pending" in placement) {
      const reason = `no node fits: ${placement.pending}`;
      if (i.reason !== reason) {
        await prisma.deploymentInstance.updateMany({
          where: { deploymentId: d.id, revision: i.revision, replica: i.replica, phase: "pending" },
          data: { reason },
        });
        await this.refreshState(d.id);
      }
      return "idle";
    }
    const { nodeId, gpus } = placement;
    const gpuUuids = gpus.map((g) => g.uuid);
    const placed = await prisma.$transaction(async (tx) => {
      await tx.$queryRaw`SELECT id FROM "Deployment" WHERE id = ${d.id}::uuid FOR UPDATE`;
      // Room on a node is the node's, not the deployment's: every placement holds the node's row,
      // so of two passes (of any deployments, on any control plane) that chose it from one
      // snapshot, the later sees the earlier's replica and goes back for a fresh view.
      await tx.$queryRaw`SELECT id FROM "Node" WHERE id = ${nodeId}::uuid FOR NO KEY UPDATE`;
      if (await placedSince(tx, nodeId, placement.seen)) return false;
      const moved = await tx.deploymentInstance.updateMany({
        where: { deploymentId: d.id, revision: i.revision, replica: i.replica, phase: "pending", nodeId: null },
        data: { nodeId, gpuUuids, gpuIndices: gpus.map((g) => g.index), phase: "loading", step: "acquire", reason: null, updatedAt: now },
      });
      if (moved.count !== 1) return false;
      const on = gpus.length > 0 ? `node ${nodeId} (GPUs ${gpus.map((g) => `${g.index} ${g.uuid}`).join(", ")})` : `node ${nodeId}`;
      await event(tx, d, { ...i, nodeId }, "pending", "loading", `placed on ${on}`, now);
      await replicaAudit(tx, "deployment.replica_placed", d, i, { nodeId, ...(gpus.length > 0 ? { gpus: gpuUuids.join(",") } : {}) }, now);
      return true;
    });
    if (placed) {
      this.evictedFor.delete(key);
      this.deps.log.info(
        { deploymentId: d.id, replica: i.replica, revision: String(i.revision), nodeId, gpus: gpuUuids },
        "deployment replica placed",
      );
    }
    // Not placed: a concurrent pass placed this replica, or a sibling took the room the snapshot saw.
    return wrote(placed);
  }

  /** Claims the step's job id on the instance, then creates the job under it. */
  private async start(d: WithInstances, i: DeploymentInstance, step: Step, now: Date): Promise<Applied> {
    const { prisma, jobs, log } = this.deps;
    const jobId = randomUUID();
    if (i.nodeId === null) return "idle";
    const nodeId = i.nodeId;
    const claimed = await prisma.deploymentInstance.updateMany({
      where: { deploymentId: d.id, revision: i.revision, replica: i.replica, nodeId, step, jobId: null },
      data: { jobId, claimedAt: now },
    });
    if (claimed.count !== 1) return "raced";
    const files = await prisma.storedArtifact.findMany({
      where: { repository: i.repository, commit: i.commit },
      select: { path: true, sizeBytes: true, sha256: true },
      orderBy: { path: "asc" },
    });
    try {
      if ((step === "acquire" || step === "load") && files.length === 0) {
        throw new ConnectError(`${i.repository}@${i.commit} has no files in the artifact store`, Code.FailedPrecondition);
      }
      const spec = specOfStep(step, {
        deploymentId: d.id,
        revision: i.revision,
        replica: i.replica,
        runtimeProfile: i.runtimeProfile,
        repository: i.repository,
        commit: i.commit,
        modelFile: i.modelFile,
        targetRoot: d.targetRoot,
        drainTimeoutMs: d.drainTimeoutMs,
        files,
        gpus: assignedGpus(i),
        ...(step === "load" ? { parallel: await replicaParallelOf(prisma, i) } : {}),
      });
      await jobs.createJob({ id: jobId, nodeId, spec, orderingKey: d.id, maxAttempts: 0, correlationId: `deployment:${d.id}` });
      log.info({ deploymentId: d.id, revision: String(i.revision), replica: i.replica, step, jobId }, "deployment step started");
    } catch (err) {
      // An outage leaves the claim: past its grace a later pass retries the step.
      if (isDatabaseUnavailable(err) || (err instanceof ConnectError && err.code === Code.Unavailable)) throw err;
      const reason = `${step} could not start: ${err instanceof ConnectError ? err.rawMessage : String(err)}`;
      const failed = await prisma.$transaction(async (tx) => {
        await holdDeployment(tx, d.id);
        const moved = await tx.deploymentInstance.updateMany({
          where: { deploymentId: d.id, revision: i.revision, replica: i.replica, jobId },
          data: { phase: "failed", step: null, jobId: null, claimedAt: null, reason, updatedAt: now },
        });
        if (moved.count === 1) await event(tx, d, i, i.phase, "failed", reason, now);
        return moved.count === 1;
      });
      if (failed) log.warn({ deploymentId: d.id, revision: String(i.revision), step, reason }, "deployment step refused");
    }
    return "changed";
  }

  /**
   * Keeps the deployment's overall state (and the reason it is failed or pending) in step with its
   * replicas; true when it stored a change. Read and written under the lock on the deployment's
   * row, so of two control planes settling it at once the later read is the one written.
   */
  private async refreshState(deploymentId: string): Promise<boolean> {
    return this.deps.prisma.$transaction(async (tx) => {
      const locked = await tx.$queryRaw<unknown[]>`SELECT id FROM "Deployment" WHERE id = ${deploymentId}::uuid FOR UPDATE`;
      if (locked.length === 0) return false;
      const d = await tx.deployment.findUniqueOrThrow({ where: { id: deploymentId }, include: { instances: true } });
      const view = { desired: d.desired as Desired, revision: d.revision, replicas: d.replicas };
      const state = overallPhase(
        view,
        d.instances.map((i) => ({ revision: i.revision, replica: i.replica, phase: i.phase as Phase })),
      );
      const failureReason = reasonOf(
        state,
        d.instances.filter((i) => i.revision === d.revision),
      );
      if (state === d.state && failureReason === d.failureReason) return false;
      await tx.deployment.updateMany({ where: { id: d.id }, data: { state, failureReason } });
      return true;
    });
  }
}

/** Why a deployment is failed or pending: its first such replica's reason. */
function reasonOf(state: OverallPhase, current: DeploymentInstance[]): string | null {
  if (state !== "failed" && state !== "pending") return null;
  const first = [...current].sort((a, b) => a.replica - b.replica).find((i) => i.phase === state && i.reason !== null);
  return first?.reason ?? null;
}

/** The audit event of a replica's placement or re-placement. */
function replicaAudit(
  tx: Prisma.TransactionClient,
  action: string,
  d: Pick<Deployment, "id" | "name">,
  i: Pick<DeploymentInstance, "replica" | "revision">,
  details: { [k: string]: string },
  now: Date,
) {
  return recordAudit(
    tx,
    {
      actor: systemActor,
      action,
      targetType: "deployment",
      targetId: d.id,
      details: { name: d.name, replica: String(i.replica), revision: String(i.revision), ...details },
    },
    now,
  );
}

/** Whether a replica the snapshot did not see now holds room on the node. */
async function placedSince(tx: Prisma.TransactionClient, nodeId: string, seen: ReadonlySet<string>): Promise<boolean> {
  const holding = await tx.deploymentInstance.findMany({
    where: { nodeId, phase: { in: HOLDING } },
    select: { deploymentId: true, revision: true, replica: true },
  });
  return holding.some((h) => !seen.has(holdingKey(h)));
}

/** Ends a job that no node has leased yet, as cancelled by the system. */
async function cancelPending(tx: Prisma.TransactionClient, jobId: string, why: string, now: Date): Promise<void> {
  await tx.job.updateMany({
    where: { id: jobId, state: "pending" },
    data: {
      state: "cancelled",
      cancelRequested: true,
      cancelReason: why,
      failure: failureJson(JobFailureCode.CANCELLED, `cancelled: ${why}`, false),
      finishedAt: now,
    },
  });
}

/** Why a replica's node cannot serve it: the node itself, else only its GPU or labels (the node, up, still runs it). */
const lostView = (node: string | undefined, gpu: string | undefined) =>
  node !== undefined ? { nodeLost: node } : gpu !== undefined ? { nodeLost: gpu, stopOnNode: true } : {};

function instanceOf(d: WithInstances, at: { revision: bigint; replica: number }): DeploymentInstance {
  return d.instances.find((x) => x.revision === at.revision && x.replica === at.replica)!;
}

/**
 * Every transaction that writes a deployment's replicas takes its deployment's row first. Placement
 * holds that row (FOR UPDATE) while it writes the replica it places; a transaction that wrote a
 * replica and then waited for the row (its event's foreign key does) deadlocked with it. KEY SHARE,
 * so moves and creates do not wait for each other, only for a placement.
 */
export async function holdDeployment(tx: Prisma.TransactionClient, deploymentId: string): Promise<void> {
  await tx.$queryRaw`SELECT id FROM "Deployment" WHERE id = ${deploymentId}::uuid FOR KEY SHARE`;
}

export async function event(
  tx: Prisma.TransactionClient,
  d: Pick<Deployment, "id">,
  i: { revision: bigint; replica: number; nodeId: string | null },
  from: string | null,
  to: string,
  reason: string | null,
  time: Date,
): Promise<void> {
  await tx.deploymentEvent.create({
    data: { deploymentId: d.id, time, revision: i.revision, replica: i.replica, nodeId: i.nodeId, fromPhase: from, toPhase: to, reason },
  });
}
