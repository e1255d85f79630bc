// The fleet-wide counts behind the node and job gauges: two grouped counts, read when scraped.
import type { PrismaClient } from "../../gen/prisma/client.js";
import { capabilityLabel, jobStates, nodeStates } from "./metrics-rules.js";

export interface FleetCounts {
  nodes: { state: string; count: number }[];
  jobs: { state: string; capability: string; count: number }[];
}

/** Nodes by state and jobs by state and capability, across every replica (two grouped counts). */
export async function fleetCounts(prisma: PrismaClient): Promise<FleetCounts> {
  const [nodes, jobs] = await Promise.all([
    prisma.$queryRaw<{ state: string; count: number }[]>`
      SELECT CASE WHEN "decommissionedAt" IS NOT NULL THEN 'decommissioned'
                  WHEN "disabledAt" IS NOT NULL THEN 'disabled'
                  ELSE liveness END AS state,
             count(*)::int AS count
        FROM "Node" GROUP BY 1`,
    prisma.job.groupBy({ by: ["state", "capability"], _count: { _all: true } }),
  ]);
  const knownNode = new Set<string>(nodeStates);
  const knownJob = new Set<string>(jobStates);
  return {
    nodes: nodes.filter((n) => knownNode.has(n.state)).map((n) => ({ state: n.state, count: Number(n.count) })),
    jobs: jobs
      .filter((j) => knownJob.has(j.state))
      .map((j) => ({ state: j.state, capability: capabilityLabel(j.capability), count: j._count._all })),
  };
}
