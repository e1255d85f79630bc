// The autoscaler: on the leader, every round, each autoscaled deployment's load as the control
// planes reported it (ServingLoad rows) goes through the rule (./autoscale-rules.ts), and a change
// it decides is written as the deployment's wanted replicas, audited with the numbers, and handed
// to the controller, which places or drains replicas as for an operator's scale. The changes still
// waiting out their delays live in memory: a new leader starts their delays afresh, and counts
// idleness from when it began (or from the latest change of the count, or from when a replica was
// last seen ready), so a failover, a cold start or a slow load never scales anything down early.
import type { PrismaClient } from "../../gen/prisma/client.js";
import type { Clock } from "../../common/clock.js";
import type { Logger } from "../observability/logger.js";
import { autoscalerActor, recordAudit } from "../audit/audit.js";
import { decideScale, type PendingScale, type ScaleSignal } from "./autoscale-rules.js";

export interface AutoscalerDeps {
  prisma: PrismaClient;
  clock: Clock;
  log: Logger;
  /** Runs the controller over one deployment now. */
  reconcile(deploymentId: string): Promise<void>;
  /** The window the reported loads were averaged over. */
  windowMs: number;
  /** A report older than this no longer counts toward the load (its replica stopped reporting). */
  staleAfterMs: number;
}

/** A report kept this long after its last write still says when the latest request came. */
const keepReportsMs = 24 * 3_600_000;

/**
 * Sets an autoscaled, serving deployment's wanted replicas from `from` to `to`, audited; false when
 * it changed meanwhile (another round, an operator, another control plane's cold start got there
 * first). The controller then acts on it.
 */
export async function scaleTo(
  deps: Pick<AutoscalerDeps, "prisma" | "clock" | "log" | "reconcile">,
  d: { id: string; name: string },
  from: number,
  to: number,
  reason: string,
  action: "deployment.autoscaled" | "deployment.evicted" = "deployment.autoscaled",
): Promise<boolean> {
  const now = new Date(deps.clock.now());
  const moved = await deps.prisma.$transaction(async (tx) => {
    const m = await tx.deployment.updateMany({
      where: { id: d.id, replicas: from, autoscale: true, desired: "serving" },
      data: { replicas: to, updatedAt: now },
    });
    if (m.count !== 1) return false;
    await recordAudit(
      tx,
      {
        actor: autoscalerActor,
        action,
        targetType: "deployment",
        targetId: d.id,
        details: { name: d.name, from: String(from), to: String(to), reason },
      },
      now,
    );
    return true;
  });
  if (!moved) return false;
  deps.log.info({ deploymentId: d.id, from, to, reason }, `scaled ${d.name} ${from} → ${to}: ${reason}`);
  await deps.reconcile(d.id);
  return true;
}

export class Autoscaler {
  private readonly pending = new Map<string, PendingScale>();
  /**
   * Since when each deployment has wanted the replicas it wants now, as this autoscaler saw it:
   * idleness is not counted from before. A count set elsewhere (a cold start on another control
   * plane, an operator) restarts it, since its requests may not be in the reports yet.
   */
  private readonly watched = new Map<string, { replicas: number; since: number }>();

  constructor(private readonly deps: AutoscalerDeps) {}

  /** One round over every autoscaled, serving deployment. */
  async round(): Promise<void> {
    const { prisma, clock } = this.deps;
    const now = clock.now();
    const deployments = await prisma.deployment.findMany({
      where: { autoscale: true, desired: "serving" },
      select: {
        id: true,
        name: true,
        replicas: true,
        minReplicas: true,
        maxReplicas: true,
        targetInFlight: true,
        upscaleDelayMs: true,
        downscaleDelayMs: true,
        scaleToZeroAfterMs: true,
        instances: { where: { phase: "ready" }, select: { replica: true } },
        loads: { select: { load: true, held: true, lastRequestAt: true, reportedAt: true } },
      },
    });
    const seen = new Set(deployments.map((d) => d.id));
    for (const id of this.watched.keys()) if (!seen.has(id)) this.forget(id);
    for (const d of deployments) {
      const watched = this.watched.get(d.id);
      // A deployment still loading its first replica is starting, not idle: idleness counts from a replica ready.
      if (watched === undefined || watched.replicas !== d.replicas || d.instances.length === 0) {
        this.watched.set(d.id, { replicas: d.replicas, since: now });
      }
      const out = decideScale({
        policy: d,
        current: d.replicas,
        signal: signalOf(d.loads, now - this.deps.staleAfterMs),
        pending: this.pending.get(d.id),
        now,
        watchedSince: this.watched.get(d.id)!.since,
        windowMs: this.deps.windowMs,
      });
      if (out.pending === undefined) this.pending.delete(d.id);
      else this.pending.set(d.id, out.pending);
      if (out.replicas === undefined) continue;
      const moved = await scaleTo(this.deps, d, d.replicas, out.replicas, out.reason ?? "").catch((err: unknown) => {
        this.deps.log.warn({ deploymentId: d.id, error: (err as Error).message }, "autoscaling a deployment failed");
        return false;
      });
      if (moved) this.watched.set(d.id, { replicas: out.replicas, since: now });
    }
    await prisma.servingLoad.deleteMany({ where: { reportedAt: { lt: new Date(now - keepReportsMs) } } });
  }

  private forget(id: string): void {
    this.pending.delete(id);
    this.watched.delete(id);
  }
}

/** The control planes' reports summed: only fresh ones carry load; any says when the latest request came. */
export function signalOf(
  loads: readonly { load: number; held: number; lastRequestAt: Date | null; reportedAt: Date }[],
  freshSince: number,
): ScaleSignal {
  let load = 0;
  let held = 0;
  let last: number | undefined;
  for (const l of loads) {
    if (l.reportedAt.getTime() >= freshSince) {
      load += l.load;
      held += l.held;
    }
    if (l.lastRequestAt !== null) last = Math.max(last ?? 0, l.lastRequestAt.getTime());
  }
  return { load, held, lastRequestAt: last };
}
