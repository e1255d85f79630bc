// Where invokes of a deployment go: the relay's view of deployments, read from the records the
// controller keeps. Only instances of a deployment the operator wants serving take new invokes.
import type { Deployment, DeploymentInstance, PrismaClient } from "../../gen/prisma/client.js";
import { isUuid } from "../../common/x509.js";
import { newestRevisionFirst, overallPhase, type Desired, type Phase } from "./rules.js";

export type DeploymentPhase = "PENDING" | "LOADING" | "READY" | "DEGRADED" | "DRAINING" | "UNLOADED" | "FAILED";
export interface DeploymentInstanceRoute {
  revision: bigint;
  replica: number;
  nodeId: string;
  phase: DeploymentPhase;
  /** Its runtime profile's engine ("llama.cpp", "openai-http"); "" when the profile is gone. */
  engine: string;
}
export interface DeploymentTarget {
  deploymentId: string;
  name: string;
  /** The deployment's overall state, for typed errors (LOADING: not ready; DRAINING: draining; ...). */
  phase: DeploymentPhase;
  /** When it was created, in epoch milliseconds (the OpenAI API's `created`). */
  createdAt: number;
  /** Per-replica bounds the operator set. */
  maxInFlight: number;
  invokeTimeoutMs: number;
  /** Replicas that take new invokes (READY), newest revision first; empty when none. */
  ready: DeploymentInstanceRoute[];
}
export interface DeploymentRoutes {
  /** By id or name; undefined when no such deployment (or it was deleted). */
  find(idOrName: string): Promise<DeploymentTarget | undefined>;
  /** Deployments by name (all when names is undefined), for DeploymentService.ListDeployments. */
  list(names: string[] | undefined, offset: number, take: number): Promise<DeploymentTarget[]>;
  /** Called on this replica whenever a deployment's routing changes (drain, revision, unload), so a relay cache can drop it at once. */
  onChange(listener: (deploymentId: string) => void): () => void;
}

/** A deployment named by its id (a UUID) or by its name. */
export function whereIdOrName(idOrName: string): { id: string } | { name: string } {
  return isUuid(idOrName) ? { id: idOrName.toLowerCase() } : { name: idOrName };
}
const upper = (p: string) => p.toUpperCase() as DeploymentPhase;

/** Engines by runtime profile name. */
type ProfileEngines = ReadonlyMap<string, string>;

export function targetOf(d: Deployment & { instances: DeploymentInstance[] }, engines: ProfileEngines = new Map()): DeploymentTarget {
  const desired = d.desired as Desired;
  const phases = d.instances.map((i) => ({ revision: i.revision, replica: i.replica, phase: i.phase as Phase }));
  const ready =
    desired === "serving"
      ? d.instances
          .filter((i): i is DeploymentInstance & { nodeId: string } => i.phase === "ready" && i.nodeId !== null)
          .sort(newestRevisionFirst)
          .map((i) => ({
            revision: i.revision,
            replica: i.replica,
            nodeId: i.nodeId,
            phase: "READY" as const,
            engine: engines.get(i.runtimeProfile) ?? "",
          }))
      : [];
  return {
    deploymentId: d.id,
    name: d.name,
    phase: upper(overallPhase({ desired, revision: d.revision, replicas: d.replicas }, phases)),
    createdAt: d.createdAt.getTime(),
    maxInFlight: d.maxInFlight,
    invokeTimeoutMs: d.invokeTimeoutMs,
    ready,
  };
}

export function deploymentRoutes(
  prisma: PrismaClient,
  changes: { onChange(listener: (deploymentId: string) => void): () => void },
): DeploymentRoutes {
  return {
    async find(idOrName) {
      const d = await prisma.deployment.findFirst({
        where: { ...whereIdOrName(idOrName), desired: { not: "deleted" } },
        include: { instances: true },
      });
      return d === null ? undefined : targetOf(d, await profileEngines(prisma, [d]));
    },
    async list(names, offset, take) {
      const rows = await prisma.deployment.findMany({
        where: { desired: { not: "deleted" }, ...(names !== undefined ? { name: { in: names } } : {}) },
        include: { instances: true },
        orderBy: { name: "asc" },
        skip: offset,
        take,
      });
      const engines = await profileEngines(prisma, rows);
      return rows.map((d) => targetOf(d, engines));
    },
    onChange: (listener) => changes.onChange(listener),
  };
}

/** The engines of the runtime profiles these deployments' instances name, in one query. */
async function profileEngines(prisma: PrismaClient, rows: { instances: DeploymentInstance[] }[]): Promise<ProfileEngines> {
  const names = [...new Set(rows.flatMap((d) => d.instances.map((i) => i.runtimeProfile)))];
  if (names.length === 0) return new Map();
  const profiles = await prisma.runtimeProfile.findMany({ where: { name: { in: names } }, select: { name: true, engine: true } });
  return new Map(profiles.map((p) => [p.name, p.engine]));
}
