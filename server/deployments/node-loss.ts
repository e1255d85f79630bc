// When a replica's node can no longer serve it, pure: the rule behind re-placement. A node that is
// disabled or decommissioned is lost at once; one whose session closed (no replica names it) is lost
// once it has been quiet for `replaceAfterMs`, a few seconds, so an agent restarting in place keeps
// its replicas; one that sent nothing for the stale threshold is lost wherever its session is said
// to be (the replica holding it may have died). A node an agent rollout told to update restarts
// on purpose: its closed session moves nothing until the stale threshold, so its replicas reload
// in place rather than moving to a node the rollout may restart next.

export interface NodeLiveness {
  id: string;
  disabledAt: Date | null;
  decommissionedAt: Date | null;
  lastHeartbeatAt: Date | null;
  sessionReplica: string | null;
  /** Its agent is updating itself (an agent rollout's step): expected back on its own. */
  updating?: boolean;
}

export interface LossBounds {
  staleAfterMs: number;
  replaceAfterMs: number;
}

/** Why the node can no longer serve replicas, or undefined when it can. */
export function nodeLoss(node: NodeLiveness | undefined, now: number, bounds: LossBounds): string | undefined {
  if (node === undefined) return "its node is gone";
  if (node.decommissionedAt !== null) return `node ${node.id} was decommissioned`;
  if (node.disabledAt !== null) return `node ${node.id} was disabled`;
  const quietMs = node.lastHeartbeatAt === null ? Number.POSITIVE_INFINITY : now - node.lastHeartbeatAt.getTime();
  if (quietMs > bounds.staleAfterMs) return `node ${node.id} is offline`;
  if (node.sessionReplica === null && !node.updating && quietMs > bounds.replaceAfterMs) return `node ${node.id}'s session closed`;
  return undefined;
}

/**
 * Why a replica's GPUs can no longer serve it, or undefined when they can: one of those assigned to
 * it was reported missing by its node's inventory (a GPU that fell off the bus takes its runtime
 * with it). Such a replica is placed again, as for a lost node.
 */
export function gpuLoss(nodeId: string, assigned: readonly string[], missing: ReadonlySet<string>): string | undefined {
  const gone = assigned.filter((uuid) => missing.has(uuid));
  if (gone.length === 0) return undefined;
  return `${gone.length === 1 ? "GPU" : "GPUs"} ${gone.join(", ")} of node ${nodeId} ${gone.length === 1 ? "is" : "are"} missing`;
}

/**
 * Why a replica placed by selector can no longer stay on its node, or undefined when it can: the
 * node's labels changed (forge nodes label) and no longer carry the selector's. A replica pinned to
 * its node (node_id) stays. Such a replica is placed again, as for a lost GPU.
 */
export function labelLoss(
  nodeId: string,
  labels: Readonly<Record<string, unknown>>,
  selector: Readonly<Record<string, string>>,
  pinned: boolean,
): string | undefined {
  if (pinned) return undefined;
  const lacking = Object.entries(selector).filter(([k, v]) => labels[k] !== v);
  if (lacking.length === 0) return undefined;
  return `node ${nodeId} no longer has the labels ${lacking.map(([k, v]) => `${k}=${v}`).join(", ")}`;
}
