// The fleet-wide counts behind the node, job and deployment replica gauges: three grouped counts, read when scraped.
import type { PrismaClient } from "../../gen/prisma/client.js";
import { capabilityLabel, jobStates, nodeStates } from "./metrics-rules.js";

export interface FleetCounts {
  nodes: { state: string; count: number }[];
  jobs: { state: string; capability: string; count: number }[];
  /** Each deployment's replicas by phase, and its wanted count as the state "wanted". */
  replicas: { deployment: string; state: string; count: number }[];
}

/** Nodes by state, jobs by state and capability, and deployments' replicas by state, across every replica. */
export async function fleetCounts(prisma: PrismaClient): Promise<FleetCounts> {
  const [nodes, jobs, replicas] = await Promise.all([
    prisma.$queryRaw<{ state: string; count: number }[]>`
      SELECT CASE WHEN "decommissionedAt" IS NOT NULL THEN 'decommissioned'
                  WHEN "disabledAt" IS NOT NULL THEN 'disabled'
                  ELSE liveness END AS state,
             count(*)::int AS count
        FROM "Node" GROUP BY 1`,
    prisma.job.groupBy({ by: ["state", "capability"], _count: { _all: true } }),
    prisma.$queryRaw<{ deployment: string; state: string; count: number }[]>`
      SELECT d.name AS deployment, i.phase AS state, count(*)::int AS count
        FROM "DeploymentInstance" AS i JOIN "Deployment" AS d ON d.id = i."deploymentId"
       WHERE d.desired <> 'deleted' AND i.phase <> 'unloaded'
       GROUP BY 1, 2
      UNION ALL
      SELECT d.name, 'wanted', d.replicas FROM "Deployment" AS d WHERE d.desired <> 'deleted'`,
  ]);
  const knownNode = new Set<string>(nodeStates);
  const knownJob = new Set<string>(jobStates);
  return {
    nodes: nodes.filter((n) => knownNode.has(n.state)).map((n) => ({ state: n.state, count: Number(n.count) })),
    jobs: jobs
      .filter((j) => knownJob.has(j.state))
      .map((j) => ({ state: j.state, capability: capabilityLabel(j.capability), count: j._count._all })),
    replicas: replicas.map((r) => ({ deployment: r.deployment, state: r.state, count: Number(r.count) })),
  };
}
