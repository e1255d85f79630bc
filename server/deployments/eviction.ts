// The replicas that may be evicted to make room on the given nodes, read from the database: ready
// replicas of other autoscaled, serving deployments of the requester's priority or lower, each the
// slot a scale-down by one removes, idle by the control planes' load reports, with the load time
// their history shows. ./eviction-rules.ts orders them; placement tries them in that order.
import type { PrismaClient } from "../../gen/prisma/client.js";
import type { Clock } from "../../common/clock.js";
import { signalOf } from "./autoscaler.js";
import type { EvictionCandidate } from "./eviction-rules.js";

export interface EvictionDeps {
  prisma: PrismaClient;
  clock: Clock;
  /** A replica is idle once its deployment had no request for this long, and none in flight. */
  idleAfterMs: number;
  /** A load report older than this counts as zero (its control plane stopped reporting). */
  reportStaleMs: number;
  /**
   * This control plane's own requests, ahead of its reports (written every few hundred ms): true
   * when the deployment has one in flight or held, or had one at `since` or later. Without it, a
   * replica that served a moment ago could read as idle and be evicted.
   */
  servedHereSince?: (deploymentId: string, since: number) => boolean;
}

/** Events read to find load times: enough for the candidates' latest loads. */
const historyRows = 1_000;

export async function evictionCandidates(
  deps: EvictionDeps,
  requester: { deploymentId: string; priority: number },
  nodeIds: readonly string[],
): Promise<{ candidates: EvictionCandidate[]; considered: number }> {
  const now = deps.clock.now();
  const rows = await deps.prisma.deploymentInstance.findMany({
    where: {
      nodeId: { in: [...nodeIds] },
      phase: "ready",
      jobId: null,
      deploymentId: { not: requester.deploymentId },
      deployment: { autoscale: true, desired: "serving", priority: { lte: requester.priority } },
    },
    select: {
      deploymentId: true,
      revision: true,
      replica: true,
      nodeId: true,
      updatedAt: true,
      deployment: {
        select: {
          name: true,
          revision: true,
          replicas: true,
          minReplicas: true,
          priority: true,
          loads: { select: { load: true, held: true, lastRequestAt: true, reportedAt: true } },
        },
      },
    },
  });
  const idle = rows.flatMap((r) => {
    const d = r.deployment;
    if (r.revision !== d.revision || r.replica !== d.replicas - 1 || d.replicas <= d.minReplicas) return [];
    const signal = signalOf(d.loads, now - deps.reportStaleMs);
    const idleMs = now - Math.max(signal.lastRequestAt ?? 0, r.updatedAt.getTime());
    if (signal.load > 0 || signal.held > 0 || idleMs < deps.idleAfterMs) return [];
    if (deps.servedHereSince?.(r.deploymentId, now - deps.idleAfterMs) === true) return [];
    return [{ ...r, nodeId: r.nodeId!, idleMs }];
  });
  const loadMs = await loadTimes(
    deps.prisma,
    idle.map((r) => r.deploymentId),
  );
  const candidates = idle.map((r) => ({
    deploymentId: r.deploymentId,
    name: r.deployment.name,
    nodeId: r.nodeId,
    revision: r.revision,
    replica: r.replica,
    priority: r.deployment.priority,
    idleMs: r.idleMs,
    loadMs: loadMs.get(`${r.deploymentId}/${r.revision}/${r.replica}`),
  }));
  return { candidates, considered: rows.length };
}

/** Each replica's latest load, from placed (LOADING) to READY, by "deployment/revision/replica". */
async function loadTimes(prisma: PrismaClient, deploymentIds: string[]): Promise<Map<string, number>> {
  if (deploymentIds.length === 0) return new Map();
  const events = await prisma.deploymentEvent.findMany({
    where: { deploymentId: { in: deploymentIds }, toPhase: { in: ["loading", "ready"] } },
    orderBy: { seq: "desc" },
    take: historyRows,
    select: { deploymentId: true, revision: true, replica: true, toPhase: true, time: true },
  });
  const readyAt = new Map<string, number>();
  const out = new Map<string, number>();
  for (const e of events) {
    const key = `${e.deploymentId}/${e.revision}/${e.replica}`;
    if (out.has(key)) continue;
    if (e.toPhase === "ready") {
      if (!readyAt.has(key)) readyAt.set(key, e.time.getTime());
    } else if (readyAt.has(key)) out.set(key, readyAt.get(key)! - e.time.getTime());
  }
  return out;
}
