// How a node looks right now: liveness from server-received heartbeat time, whether a session is
// open here, how many GPUs are present.
import type { Node } from "../../gen/prisma/client.js";
import { computeLiveness } from "../domain/liveness.js";
import { nodeToProto, type NodeView } from "../services/convert.js";
import type { Deps } from "../app.js";

export function viewOf(deps: Deps, node: Node, gpuCount: number, now = Date.now()): NodeView {
  const lastHeartbeatAt = deps.heartbeats.lastHeartbeatAt(node.id, node.lastHeartbeatAt);
  return {
    liveness: computeLiveness(
      { lastHeartbeatAt, disabled: node.disabledAt !== null, decommissioned: node.decommissionedAt !== null },
      now,
      { staleAfterMs: deps.config.staleAfterMs, offlineAfterMs: deps.config.offlineAfterMs },
    ),
    lastHeartbeatAt: lastHeartbeatAt === null ? null : new Date(lastHeartbeatAt),
    connected: deps.sessions.isConnected(node.id),
    gpuCount,
  };
}

export async function presentGpuCounts(deps: Deps, nodeIds: string[]): Promise<Map<string, number>> {
  if (nodeIds.length === 0) return new Map();
  const rows = await deps.db.prisma.gpu.groupBy({
    by: ["nodeId"],
    where: { nodeId: { in: nodeIds }, state: "present" },
    _count: { _all: true },
  });
  return new Map(rows.map((r) => [r.nodeId, r._count._all]));
}

export async function nodeMessages(deps: Deps, nodes: Node[]) {
  const counts = await presentGpuCounts(deps, nodes.map((n) => n.id));
  const now = Date.now();
  return nodes.map((node) => {
    const view = viewOf(deps, node, counts.get(node.id) ?? 0, now);
    return { node, view, message: nodeToProto(node, view) };
  });
}
