// The rollout rules, pure so they are table tests: which nodes a rollout may update and in which
// batches (nodes serving a deployment's last READY replica last, each after a surge replica is READY
// elsewhere), and what one step of a running rollout does given what it sees of its nodes and the
// time.
import { compareVersions, parseVersion } from "../agent-version.js";

/** Why `from` may not be updated to `to`, or undefined when it may. */
export function updateRefusal(from: string, to: string, oldestAccepted: string): string | undefined {
  const target = parseVersion(to);
  const floor = parseVersion(oldestAccepted);
  if (target === undefined) return `${to} is not a semantic version`;
  if (floor !== undefined && compareVersions(target, floor) < 0) {
    return `${to} is below the oldest agent version this control plane accepts (${oldestAccepted})`;
  }
  const current = parseVersion(from);
  if (current !== undefined && target.core[0] < current.core[0]) {
    return `${to} would take the agent down across a major version (from ${from})`;
  }
  return undefined;
}

export interface Candidate {
  id: string;
  name: string;
  agentVersion: string;
  /** Serves the only READY replica of some deployment: updating it first would take that deployment down. */
  holdsLastReadyReplica: boolean;
}

export interface Plan {
  /** Node ids per batch, in order. */
  batches: string[][];
  /** Nodes already on the version. */
  current: string[];
}

/** At least one node per batch; `percent` of the chosen nodes otherwise, rounded up. */
export function batchSize(nodes: number, percent: number): number {
  return Math.max(1, Math.ceil((nodes * percent) / 100));
}

/**
 * Splits the nodes to update into batches: nodes holding a last READY replica after all others
 * (each group by name, so a plan is reproducible). Nodes already on the version are left out.
 */
export function planBatches(candidates: readonly Candidate[], version: string, percent: number): Plan {
  const current = candidates.filter((c) => c.agentVersion === version).map((c) => c.id);
  const toUpdate = candidates
    .filter((c) => c.agentVersion !== version)
    .sort((a, b) => Number(a.holdsLastReadyReplica) - Number(b.holdsLastReadyReplica) || a.name.localeCompare(b.name));
  const size = batchSize(toUpdate.length, percent);
  const batches: string[][] = [];
  for (let i = 0; i < toUpdate.length; i += size) batches.push(toUpdate.slice(i, i + size).map((c) => c.id));
  return { batches, current };
}

export type NodeState = "pending" | "updating" | "updated" | "failed" | "skipped";

/** What the controller sees of one node of the current batch. */
export interface NodeView {
  id: string;
  name: string;
  state: NodeState;
  connected: boolean;
  agentVersion: string;
  /** Every deployment the node holds is READY at its current revision. */
  deploymentsReady: boolean;
  /** A job that cannot be interrupted is running on it. */
  busy: boolean;
  /** Deployments whose only READY replicas are on it, with no surge asked for yet: ask before updating it. */
  needsSurge: string[];
  /** Deployments surged for it whose extra replica is placed but not READY yet: wait before updating it. */
  surgeWaiting: string[];
  /** Why it failed (the node's report) or was skipped. */
  reason: string | undefined;
}

export interface RolloutView {
  version: string;
  currentBatch: number;
  batches: number;
  pauseBetweenMs: number;
  batchDeadlineMs: number;
  batchStartedAt: number | undefined;
  batchHealthyAt: number | undefined;
}

export type Step =
  /** `surge`: for each node, the deployments to give one replica more before it is updated. */
  | { kind: "wait"; send: string[]; updated: string[]; surge: { nodeId: string; deployments: string[] }[] }
  | { kind: "pause"; reason: string; updated: string[] }
  | { kind: "healthy"; updated: string[] }
  | { kind: "advance" }
  | { kind: "complete" };

function healthyOn(n: NodeView, version: string): boolean {
  return n.connected && n.agentVersion === version && n.deploymentsReady;
}

function describe(n: NodeView, version: string): string {
  if (n.busy && n.state === "pending") return `${n.name} runs a job that cannot be interrupted`;
  if (!n.connected) return `${n.name} is not connected`;
  if (n.state === "pending" && n.surgeWaiting.length > 0) return `${n.name} waits for a surge replica of ${n.surgeWaiting.join(", ")}`;
  if (n.agentVersion !== version) return `${n.name} is on ${n.agentVersion || "an unknown version"}`;
  return `${n.name}'s deployments are not READY`;
}

/**
 * One step of a running rollout's current batch. Before the batch is healthy: send the update to
 * its pending nodes that are connected and not busy, mark nodes back on the version with READY
 * deployments as updated, and pause when one failed (it reported so) or the deadline passed. Once healthy, the batch must stay so for the pause between batches (the
 * regression window) before the next starts; a regression pauses the rollout.
 */
export function stepRollout(rollout: RolloutView, nodes: readonly NodeView[], now: number): Step {
  const { version } = rollout;
  const batchNo = `batch ${rollout.currentBatch + 1} of ${rollout.batches}`;
  if (rollout.batchHealthyAt !== undefined) {
    const regressed = nodes.filter((n) => n.state === "updated" && !healthyOn(n, version));
    if (regressed.length > 0) {
      return { kind: "pause", reason: `${batchNo} regressed: ${regressed.map((n) => describe(n, version)).join("; ")}`, updated: [] };
    }
    if (now - rollout.batchHealthyAt < rollout.pauseBetweenMs) return { kind: "wait", send: [], updated: [], surge: [] };
    return rollout.currentBatch + 1 >= rollout.batches ? { kind: "complete" } : { kind: "advance" };
  }
  const updated = nodes.filter((n) => n.state === "updating" && healthyOn(n, version)).map((n) => n.id);
  const failures = nodes.filter((n) => n.state === "failed");
  if (failures.length > 0) {
    const why = failures.map((n) => `${n.name}: ${n.reason ?? "update failed"}`).join("; ");
    return { kind: "pause", reason: `${batchNo} failed: ${why}`, updated };
  }
  const unfinished = nodes.filter((n) => n.state !== "skipped" && n.state !== "updated" && !updated.includes(n.id));
  if (unfinished.length === 0) return { kind: "healthy", updated };
  const started = rollout.batchStartedAt ?? now;
  if (now - started >= rollout.batchDeadlineMs) {
    const why = unfinished.map((n) => describe(n, version)).join("; ");
    return { kind: "pause", reason: `${batchNo} not healthy within ${rollout.batchDeadlineMs / 1000}s: ${why}`, updated };
  }
  // A node serving a deployment's only READY replicas is updated once one more serves elsewhere
  // (its surge), so the deployment never goes dark; a surge that fits nowhere is not waited for.
  const ready = nodes.filter((n) => n.state === "pending" && n.connected && !n.busy);
  const send = ready.filter((n) => n.needsSurge.length === 0 && n.surgeWaiting.length === 0).map((n) => n.id);
  const surge = ready.filter((n) => n.needsSurge.length > 0).map((n) => ({ nodeId: n.id, deployments: n.needsSurge }));
  return { kind: "wait", send, updated, surge };
}
