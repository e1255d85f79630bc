// Fleet-wide agent upgrades (server/agents/): releases in the artifact store, rollouts run by the
// leader, update instructions delivered by whichever replica holds a node's session.
import type { Config } from "../config.js";
import { ConfigError } from "../config.js";
import { loadReleaseKey } from "../../common/release-key.js";
import type { AgentUpdateReport } from "../../gen/proto/modelforge/agent/v1/agent_update_pb.js";
import { AgentReleases } from "../agents/releases.js";
import { AgentRollouts } from "../agents/rollouts.js";
import { UpdateDelivery } from "../agents/delivery.js";
import { adminUpgrades } from "../agents/admin-rpc.js";
import { agentUpgrades } from "../agents/agent-rpc.js";
import type { Cluster } from "./cluster.js";
import type { Sessions } from "./sessions.js";
import type { Deployments } from "./deployments.js";
import type { Loop } from "./loops.js";
import type { Core } from "./core.js";

export interface UpgradesDeps extends Core {
  config: Pick<Config, "agentReleaseKeyFile" | "minAgentVersion" | "reconcileIntervalMs">;
  cluster: Cluster;
  sessions: Sessions;
  deployments: Deployments;
}

export async function openUpgrades(deps: UpgradesDeps) {
  const { config, clock, log, db, cluster } = deps;
  const { prisma } = db;
  const key =
    config.agentReleaseKeyFile === undefined
      ? undefined
      : await loadReleaseKey(config.agentReleaseKeyFile).catch((err: Error) => {
          throw new ConfigError(`MODELFORGE_AGENT_RELEASE_KEY: ${err.message}`);
        });
  const store = deps.deployments.artifacts;
  const releases = new AgentReleases({ prisma, clock, store, key });
  const registry = deps.sessions.registry;
  const rollouts = new AgentRollouts({
    prisma,
    clock,
    minAgentVersion: config.minAgentVersion,
    connectedHere: (id) => registry.isConnected(id),
  });
  const delivery = new UpdateDelivery({ prisma, sessions: registry, log });
  const loops: Loop[] = [
    {
      name: "agent rollouts",
      everyMs: config.reconcileIntervalMs,
      run: async () => cluster.leadership.isLeader() && (await rollouts.tick()),
      outage: db.outage,
    },
    { name: "agent update delivery", everyMs: config.reconcileIntervalMs, run: () => delivery.deliver(), outage: db.outage },
  ];
  const nodeNames = async (ids: string[]) =>
    new Map((await prisma.node.findMany({ where: { id: { in: ids } }, select: { id: true, name: true } })).map((n) => [n.id, n.name]));
  return {
    loops,
    adminRpcs: adminUpgrades({ releases, rollouts, nodeNames }),
    agentRpcs: agentUpgrades({ prisma, clock, store, releases }),
    session: {
      sessionOpened(nodeId: string, lastUpdate: AgentUpdateReport | undefined) {
        delivery.sessionOpened(nodeId);
        if (lastUpdate === undefined) return;
        rollouts
          .reported(nodeId, lastUpdate)
          .catch((err: unknown) => log.error({ err, nodeId }, "recording an agent update report failed"));
      },
    },
  };
}

export type Upgrades = Awaited<ReturnType<typeof openUpgrades>>;
