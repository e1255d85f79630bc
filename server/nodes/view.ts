// How a node looks right now: liveness from server-received heartbeat time, whether a session is
// open and on which replica, how many GPUs are present.
import type { Node, PrismaClient } from "../../gen/prisma/client.js";
import type { Clock } from "../../common/clock.js";
import type { LivenessTracker } from "../liveness/tracker.js";
import type { NodeSessions } from "../node-sessions.js";
import { nodeToProto, type NodeView } from "./codec.js";
import { isAgentOutdated } from "../agent-version.js";

/** What presenting nodes works with. */
export interface ViewDeps {
  prisma: PrismaClient;
  clock: Clock;
  liveness: LivenessTracker;
  sessions: Pick<NodeSessions, "isConnected">;
  /** This replica's id (server/cluster/bus.ts), named as the holder of the sessions here. */
  replicaId?: string;
  /** Agents older than this are flagged as outdated (../agent-version.ts). */
  minAgentVersion: string;
}

function viewOf(deps: ViewDeps, node: Node, gpuCount: number, now = deps.clock.now()): NodeView {
  const lastHeartbeatAt = deps.liveness.lastHeartbeatAt(node);
  const liveness = deps.liveness.of(node, now);
  // A session here is known for sure; one elsewhere from the holder's heartbeat flush, while fresh.
  const here = deps.sessions.isConnected(node.id);
  // (Named as this replica's but not here: it ended after the last flush.)
  const elsewhere = liveness === "online" && node.sessionReplica !== null && node.sessionReplica !== deps.replicaId;
  const sessionReplica = here ? (deps.replicaId ?? "") : elsewhere ? node.sessionReplica! : "";
  return {
    liveness,
    lastHeartbeatAt: lastHeartbeatAt === null ? null : new Date(lastHeartbeatAt),
    connected: here || sessionReplica !== "",
    sessionReplica,
    gpuCount,
    agentOutdated: isAgentOutdated(node.agentVersion, deps.minAgentVersion),
  };
}

async function presentGpuCounts(prisma: PrismaClient, nodeIds: string[]): Promise<Map<string, number>> {
  if (nodeIds.length === 0) return new Map();
  const rows = await prisma.gpu.groupBy({
    by: ["nodeId"],
    where: { nodeId: { in: nodeIds }, state: "present" },
    _count: { _all: true },
  });
  return new Map(rows.map((r) => [r.nodeId, r._count._all]));
}

export async function nodeMessages(deps: ViewDeps, nodes: Node[]) {
  const counts = await presentGpuCounts(
    deps.prisma,
    nodes.map((n) => n.id),
  );
  const now = deps.clock.now();
  return nodes.map((node) => {
    const view = viewOf(deps, node, counts.get(node.id) ?? 0, now);
    return { node, view, message: nodeToProto(node, view) };
  });
}
