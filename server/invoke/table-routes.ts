// A stand-in for server/deployments/routes.ts until the deployment control path lands: routes
// read from the Deployment table as it is (one node, one revision per row). Replaced by the
// deployments feature's own implementation of DeploymentRoutes.
import type { PrismaClient, Deployment } from "../../gen/prisma/client.js";
import type { DeploymentPhase, DeploymentRoutes, DeploymentTarget } from "./routes.js";

const phases: Record<string, DeploymentPhase> = {
  loading: "LOADING",
  ready: "READY",
  draining: "DRAINING",
  unloaded: "UNLOADED",
  failed: "FAILED",
};
const uuidPattern = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

function targetOf(row: Deployment): DeploymentTarget {
  const phase = phases[row.state] ?? "FAILED";
  return {
    deploymentId: row.id,
    name: row.name,
    phase,
    maxInFlight: 64,
    invokeTimeoutMs: 120_000,
    ready: phase === "READY" ? [{ revision: row.revision, nodeId: row.nodeId, phase }] : [],
  };
}

export function tableRoutes(prisma: PrismaClient): DeploymentRoutes & { changed(deploymentId: string): void } {
  const listeners = new Set<(deploymentId: string) => void>();
  return {
    async find(idOrName) {
      const row = await prisma.deployment.findFirst({
        where: uuidPattern.test(idOrName) ? { OR: [{ id: idOrName }, { name: idOrName }] } : { name: idOrName },
        orderBy: { createdAt: "desc" },
      });
      return row === null ? undefined : targetOf(row);
    },
    async list(names, offset, take) {
      const rows = await prisma.deployment.findMany({
        where: names === undefined ? {} : { name: { in: names } },
        orderBy: [{ name: "asc" }, { id: "asc" }],
        skip: offset,
        take,
      });
      return rows.map(targetOf);
    },
    onChange(listener) {
      listeners.add(listener);
      return () => listeners.delete(listener);
    },
    changed(deploymentId) {
      for (const l of listeners) l(deploymentId);
    },
  };
}
