// What the rollout rules read from the database: the candidate nodes of a new rollout, and the
// current batch's nodes as the controller sees them.
import type { AgentRollout, PrismaClient } from "../../gen/prisma/client.js";
import { stringMap } from "../rpc/convert.js";
import type { Candidate, NodeState, NodeView } from "./rollout-rules.js";

/**
 * Jobs an agent restart would cut short: a runtime half loaded, drained or unloaded. (An artifact
 * download resumes after a restart, and a probe is retried.)
 */
export const uninterruptibleCapabilities = ["deployment.load.v1", "deployment.drain.v1", "deployment.unload.v1"];

function matches(labels: Record<string, string>, selector: Record<string, string>): boolean {
  return Object.entries(selector).every(([k, v]) => labels[k] === v);
}

/** Enabled nodes the selector chooses, with whether each serves the only READY replica of a deployment. */
export async function candidatesOf(prisma: PrismaClient, selector: Record<string, string>): Promise<Candidate[]> {
  const nodes = await prisma.node.findMany({
    where: { decommissionedAt: null, disabledAt: null },
    select: { id: true, name: true, labels: true, agentVersion: true },
  });
  const ready = await prisma.deploymentInstance.findMany({ where: { phase: "ready" }, select: { deploymentId: true, nodeId: true } });
  const readyCount = new Map<string, number>();
  for (const r of ready) readyCount.set(r.deploymentId, (readyCount.get(r.deploymentId) ?? 0) + 1);
  const lastHolders = new Set(ready.filter((r) => readyCount.get(r.deploymentId) === 1).map((r) => r.nodeId));
  return nodes
    .filter((n) => matches(stringMap(n.labels), selector))
    .map((n) => ({ id: n.id, name: n.name, agentVersion: n.agentVersion ?? "", holdsLastReadyReplica: lastHolders.has(n.id) }));
}

/** The current batch's nodes: state, connection, version, deployments and uninterruptible work. */
export async function batchNodeViews(
  prisma: PrismaClient,
  rollout: Pick<AgentRollout, "id" | "currentBatch">,
  connectedHere: (nodeId: string) => boolean,
): Promise<NodeView[]> {
  const members = await prisma.agentRolloutNode.findMany({ where: { rolloutId: rollout.id, batch: rollout.currentBatch } });
  const ids = members.map((m) => m.nodeId);
  const [nodes, instances, busy] = await Promise.all([
    prisma.node.findMany({
      where: { id: { in: ids } },
      select: { id: true, name: true, agentVersion: true, sessionReplica: true, liveness: true },
    }),
    prisma.deploymentInstance.findMany({
      where: { nodeId: { in: ids }, deployment: { desired: "serving" } },
      select: { nodeId: true, phase: true, revision: true, deployment: { select: { revision: true } } },
    }),
    prisma.job.findMany({
      where: { nodeId: { in: ids }, state: "leased", capability: { in: uninterruptibleCapabilities } },
      select: { nodeId: true },
    }),
  ]);
  const surges = await surgesOf(prisma, ids);
  const byId = new Map(nodes.map((n) => [n.id, n]));
  const notReady = new Set(instances.filter((i) => i.revision === i.deployment.revision && i.phase !== "ready").map((i) => i.nodeId));
  const busyIds = new Set(busy.map((j) => j.nodeId));
  return members.map((m) => ({
    id: m.nodeId,
    name: byId.get(m.nodeId)?.name ?? m.nodeId,
    state: m.state as NodeState,
    connected: connectedHere(m.nodeId) || (byId.get(m.nodeId)?.sessionReplica != null && byId.get(m.nodeId)?.liveness === "online"),
    agentVersion: byId.get(m.nodeId)?.agentVersion ?? "",
    deploymentsReady: !notReady.has(m.nodeId),
    busy: busyIds.has(m.nodeId),
    needsSurge: surges.needs.get(m.nodeId) ?? [],
    surgeWaiting: surges.waiting.get(m.nodeId) ?? [],
    reason: m.reason ?? undefined,
  }));
}

/** Per node: deployments whose READY replicas are all on it, unsurged (ids), and surged but not yet served elsewhere (names). */
async function surgesOf(
  prisma: PrismaClient,
  nodeIds: string[],
): Promise<{ needs: Map<string, string[]>; waiting: Map<string, string[]> }> {
  const needs = new Map<string, string[]>();
  const waiting = new Map<string, string[]>();
  // Deployments with a READY replica on one of the nodes, with all their replicas.
  const deployments = await prisma.deployment.findMany({
    where: { desired: "serving", instances: { some: { nodeId: { in: nodeIds }, phase: "ready" } } },
    select: {
      id: true,
      name: true,
      replicas: true,
      surgeForNodeId: true,
      instances: { select: { nodeId: true, phase: true, replica: true, reason: true } },
    },
  });
  for (const d of deployments) {
    const readyOn = new Set(d.instances.filter((i) => i.phase === "ready").map((i) => i.nodeId));
    if (readyOn.size !== 1) continue;
    const [nodeId] = [...readyOn] as [string];
    if (d.surgeForNodeId !== nodeId) {
      needs.set(nodeId, [...(needs.get(nodeId) ?? []), d.id]);
      continue;
    }
    // The surge slot is the one past the wanted replicas. Placement refused it (unplaced, with the
    // reason no node fits): not waited for. Just created, it is unplaced too, but with no reason yet.
    const slot = d.instances.find((i) => i.replica === d.replicas);
    const fitsNowhere = slot !== undefined && slot.nodeId === null && slot.reason !== null;
    if (!fitsNowhere) waiting.set(nodeId, [...(waiting.get(nodeId) ?? []), d.name]);
  }
  return { needs, waiting };
}
