// Replicas on one PostgreSQL: what needs a session on another replica goes through the bus, and
// one of them at a time (the leader) runs the reconcilers. On the embedded database both are local.
import type { Config } from "../config.js";
import type { Logger } from "../observability/logger.js";
import type { Database } from "../db/client.js";
import { openClusterBus, type ClusterBus } from "../cluster/bus.js";
import { openLeadership, type Leadership } from "../cluster/leadership.js";

export interface Cluster {
  bus: ClusterBus;
  leadership: Leadership;
  close(): Promise<void>;
}

export async function openCluster(config: Pick<Config, "databaseUrl" | "dataDir">, db: Database, log: Logger): Promise<Cluster> {
  const bus = await openClusterBus({ prisma: db.prisma, databaseUrl: config.databaseUrl, dataDir: config.dataDir, log, outage: db.outage });
  const leadership = await openLeadership({ databaseUrl: config.databaseUrl, replicaId: bus.replicaId, log, outage: db.outage });
  return {
    bus,
    leadership,
    async close() {
      await leadership.close();
      await bus.close();
    },
  };
}
