// Where each running replica can be reached directly: a deployment invoke that arrives at a
// replica not holding the serving node's Session is forwarded to the one that does (the invoke's
// payload, up to megabytes, cannot ride the bus). Each replica writes its row at start, refreshes
// it while it runs and deletes it at a graceful stop; a row not refreshed within `aliveMs` is a
// replica that died (kill -9) and is never forwarded to.
import type { PrismaClient } from "../../gen/prisma/client.js";
import type { Clock } from "../../common/clock.js";

/** The replica holding a node's Session, as the database last heard it. */
export interface SessionHolder {
  nodeId: string;
  replicaId: string;
  url: string;
}

export interface ReplicaDirectory {
  /** The first of these nodes (in the order given) online with a Session on another live replica. */
  holderOf(nodeIds: readonly string[]): Promise<SessionHolder | undefined>;
}

/** How often a replica refreshes its row, and how old a row may be and still count as alive. */
export const replicaRefreshMs = 10_000;
export const replicaAliveMs = 3 * replicaRefreshMs;

export function replicaDirectory(deps: { prisma: PrismaClient; clock: Clock; replicaId: string }): ReplicaDirectory {
  return {
    async holderOf(nodeIds) {
      if (nodeIds.length === 0) return undefined;
      const aliveSince = new Date(deps.clock.now() - replicaAliveMs);
      // One round trip: the node's holder (written with its heartbeats) joined to that replica's row.
      const rows = await deps.prisma.$queryRaw<SessionHolder[]>`
        SELECT n.id AS "nodeId", r.id::text AS "replicaId", r.url AS url
          FROM "Node" n JOIN "ControlPlaneReplica" r ON r.id::text = n."sessionReplica"
         WHERE n.id = ANY(${[...nodeIds]}::uuid[]) AND n.liveness = 'online'
           AND r."seenAt" >= ${aliveSince} AND r.id::text <> ${deps.replicaId}`;
      return nodeIds.map((id) => rows.find((r) => r.nodeId === id)).find((r) => r !== undefined);
    },
  };
}

/** This replica's row: written now, refreshed by `refresh`, deleted by `remove`. */
export async function registerReplica(deps: { prisma: PrismaClient; clock: Clock; replicaId: string; url: string }) {
  const row = () => ({ url: deps.url, seenAt: new Date(deps.clock.now()) });
  await deps.prisma.controlPlaneReplica.upsert({ where: { id: deps.replicaId }, create: { id: deps.replicaId, ...row() }, update: row() });
  return {
    /** Also forgets replicas that died long ago, so the table holds only recent ones. */
    refresh: async () => {
      await deps.prisma.controlPlaneReplica.upsert({
        where: { id: deps.replicaId },
        create: { id: deps.replicaId, ...row() },
        update: row(),
      });
      await deps.prisma.controlPlaneReplica.deleteMany({ where: { seenAt: { lt: new Date(deps.clock.now() - 100 * replicaAliveMs) } } });
    },
    remove: async () => {
      await deps.prisma.controlPlaneReplica.deleteMany({ where: { id: deps.replicaId } });
    },
  };
}
