// The deployment controller: each pass reads deployments, their instances and the jobs of their
// steps, asks ./rules.ts what happens next, and applies it with conditional writes (so several
// replicas may run it at once: of two racing on one instance, one write matches). Jobs are created
// under an id claimed on the instance first, so a step never runs twice.
import { randomUUID } from "node:crypto";
import { Code, ConnectError } from "@connectrpc/connect";
import type { Deployment, DeploymentInstance, Job, Prisma, PrismaClient } from "../../gen/prisma/client.js";
import type { Clock } from "../../common/clock.js";
import type { Logger } from "../observability/logger.js";
import type { CreateJobInput } from "../jobs/create.js";
import { isDatabaseUnavailable } from "../db/availability.js";
import { recordAudit, systemActor } from "../audit/audit.js";
import {
  failureText,
  overallPhase,
  plan,
  type Action,
  type Desired,
  type InstanceView,
  type JobOutcome,
  type Phase,
  type Step,
} from "./rules.js";
import { specOfStep } from "./specs.js";
import { unsettledDeployments } from "./unsettled.js";

export interface DeploymentControllerDeps {
  prisma: PrismaClient;
  clock: Clock;
  log: Logger;
  jobs: { createJob(input: CreateJobInput): Promise<unknown> };
  /** Tells the other replicas a deployment's routing changed here (the cluster bus). */
  announce?: (deploymentId: string) => void;
}

type WithInstances = Deployment & { instances: DeploymentInstance[] };

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

  constructor(private readonly deps: DeploymentControllerDeps) {}

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
    const ids = await unsettledDeployments(this.deps.prisma);
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
      const changed = await this.step(d);
      if (!changed) break;
      d = await this.deps.prisma.deployment.findUnique({ where: { id: d.id }, include: { instances: true } });
    }
  }

  /** Plans and applies one round; true when anything changed. */
  private async step(d: WithInstances): Promise<boolean> {
    const { prisma, clock } = this.deps;
    const jobIds = d.instances.map((i) => i.jobId).filter((id): id is string => id !== null);
    const jobs =
      jobIds.length === 0
        ? []
        : await prisma.job.findMany({ where: { id: { in: jobIds } }, select: { id: true, state: true, result: true, failure: true } });
    const byId = new Map(jobs.map((j) => [j.id, j]));
    const views: InstanceView[] = d.instances.map((i) => ({
      revision: i.revision,
      phase: i.phase as Phase,
      step: i.step as Step | null,
      jobId: i.jobId,
      claimedAt: i.claimedAt?.getTime() ?? null,
      ...(i.jobId !== null ? { job: outcomeOf(byId.get(i.jobId)) } : {}),
    }));
    const view = { desired: d.desired as Desired, revision: d.revision };
    const actions = plan(view, views, clock.now());
    let changed = false;
    for (const action of actions) {
      try {
        if (await this.apply(d, action)) changed = true;
      } catch (err) {
        if (isDatabaseUnavailable(err)) throw err;
        this.deps.log.error({ err, deploymentId: d.id, action: action.kind }, "deployment step failed");
      }
    }
    if (changed) {
      await this.refreshState(d.id);
      this.changed(d.id);
    }
    return changed;
  }

  /** Routing may have changed: the relay here and the other replicas are told. */
  private changed(deploymentId: string): void {
    for (const listener of this.listeners) listener(deploymentId);
    this.deps.announce?.(deploymentId);
  }

  private async apply(d: WithInstances, action: Action): Promise<boolean> {
    const { prisma, clock } = this.deps;
    const now = new Date(clock.now());
    switch (action.kind) {
      case "create": {
        return prisma.$transaction(async (tx) => {
          const made = await tx.deploymentInstance.createMany({
            data: [
              {
                deploymentId: d.id,
                revision: action.revision,
                nodeId: d.nodeId,
                runtimeProfile: d.runtimeProfile,
                repository: d.repository,
                commit: d.commit,
                modelFile: d.modelFile,
                phase: "loading",
                step: "acquire",
                updatedAt: now,
              },
            ],
            skipDuplicates: true,
          });
          if (made.count !== 1) return false;
          await event(tx, d, action.revision, null, "loading", `revision ${action.revision} of ${d.repository}@${d.commit}`, now);
          return true;
        });
      }
      case "move": {
        const i = d.instances.find((x) => x.revision === action.revision)!;
        return prisma.$transaction(async (tx) => {
          const moved = await tx.deploymentInstance.updateMany({
            where: { deploymentId: d.id, revision: i.revision, phase: i.phase, step: i.step, jobId: i.jobId },
            data: {
              phase: action.to,
              step: action.step,
              jobId: null,
              claimedAt: null,
              updatedAt: now,
              ...(action.reason !== undefined ? { reason: action.reason } : {}),
              ...(action.runtimeId !== undefined ? { runtimeId: action.runtimeId } : {}),
            },
          });
          if (moved.count !== 1) return false;
          if (action.to !== i.phase) await event(tx, d, i.revision, i.phase, action.to, action.reason ?? null, now);
          return true;
        });
      }
      case "start":
        return this.start(d, d.instances.find((x) => x.revision === action.revision)!, action.step, now);
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
        return removed;
      }
    }
  }

  /** Claims the step's job id on the instance, then creates the job under it. */
  private async start(d: WithInstances, i: DeploymentInstance, step: Step, now: Date): Promise<boolean> {
    const { prisma, jobs, log } = this.deps;
    const jobId = randomUUID();
    const claimed = await prisma.deploymentInstance.updateMany({
      where: { deploymentId: d.id, revision: i.revision, step, jobId: null },
      data: { jobId, claimedAt: now },
    });
    if (claimed.count !== 1) return false;
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
        runtimeProfile: i.runtimeProfile,
        repository: i.repository,
        commit: i.commit,
        modelFile: i.modelFile,
        targetRoot: d.targetRoot,
        drainTimeoutMs: d.drainTimeoutMs,
        files,
      });
      await jobs.createJob({ id: jobId, nodeId: i.nodeId, spec, orderingKey: d.id, maxAttempts: 0, correlationId: `deployment:${d.id}` });
      log.info({ deploymentId: d.id, revision: String(i.revision), step, jobId }, "deployment step started");
    } catch (err) {
      // An outage leaves the claim: past its grace a later pass retries the step.
      if (isDatabaseUnavailable(err) || (err instanceof ConnectError && err.code === Code.Unavailable)) throw err;
      const reason = `${step} could not start: ${err instanceof ConnectError ? err.rawMessage : String(err)}`;
      const failed = await prisma.$transaction(async (tx) => {
        const moved = await tx.deploymentInstance.updateMany({
          where: { deploymentId: d.id, revision: i.revision, jobId },
          data: { phase: "failed", step: null, jobId: null, claimedAt: null, reason, updatedAt: now },
        });
        if (moved.count === 1) await event(tx, d, i.revision, i.phase, "failed", reason, now);
        return moved.count === 1;
      });
      if (failed) log.warn({ deploymentId: d.id, revision: String(i.revision), step, reason }, "deployment step refused");
    }
    return true;
  }

  /** Keeps the deployment's overall state (and failure reason) in step with its instances; true when it stored a change. */
  private async refreshState(deploymentId: string): Promise<boolean> {
    const d = await this.deps.prisma.deployment.findUnique({ where: { id: deploymentId }, include: { instances: true } });
    if (d === null) return false;
    const state = overallPhase(
      { desired: d.desired as Desired, revision: d.revision },
      d.instances.map((i) => ({ revision: i.revision, phase: i.phase as Phase })),
    );
    const current = d.instances.find((i) => i.revision === d.revision);
    const failureReason = state === "failed" ? (current?.reason ?? null) : null;
    if (state === d.state && failureReason === d.failureReason) return false;
    await this.deps.prisma.deployment.updateMany({ where: { id: d.id }, data: { state, failureReason } });
    return true;
  }
}

/** One row of a deployment's state history, in the transaction that made the change. */
export async function event(
  tx: Prisma.TransactionClient,
  d: Pick<Deployment, "id" | "nodeId">,
  revision: bigint,
  from: string | null,
  to: string,
  reason: string | null,
  time: Date,
): Promise<void> {
  await tx.deploymentEvent.create({ data: { deploymentId: d.id, time, revision, nodeId: d.nodeId, fromPhase: from, toPhase: to, reason } });
}
