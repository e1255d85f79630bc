// Where invokes of a deployment go: the relay's view of deployments, read from the records the
// controller keeps. Only instances of a deployment the operator wants serving take new invokes.
import type { Deployment, DeploymentInstance, PrismaClient } from "../../gen/prisma/client.js";
import { isUuid } from "../../common/x509.js";
import type { DirectQuery, DirectStatement } from "../db/direct.js";
import { newestRevisionFirst, overallPhase, type Desired, type Phase } from "./rules.js";

export type DeploymentPhase = "PENDING" | "LOADING" | "READY" | "DEGRADED" | "DRAINING" | "UNLOADED" | "FAILED";
export interface DeploymentInstanceRoute {
  revision: bigint;
  replica: number;
  nodeId: string;
  phase: DeploymentPhase;
  /** Its runtime profile's engine ("llama.cpp", "openai-http"); "" when the profile is gone. */
  engine: string;
  /** Whether its profile turns the built-in engine's embeddings on (llama.cpp's `embeddings`). */
  embeddings: boolean;
  /** The runtime serving it, new at every load: a replica that restarted is told apart by it. */
  runtimeId: string;
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
  /**
   * Set for a serving deployment under autoscaling: a request finding no ready replica waits for
   * one (up to timeoutMs) instead of being refused; `replicas` is how many it wants now.
   */
  coldStart?: { timeoutMs: number; replicas: number };
}
export interface DeploymentRoutes {
  /** By id or name; undefined when no such deployment (or it was deleted). */
  find(idOrName: string): Promise<DeploymentTarget | undefined>;
  /** Deployments by name (all when names is undefined), for DeploymentService.ListDeployments. */
  list(names: string[] | undefined, offset: number, take: number): Promise<DeploymentTarget[]>;
  /** Called on this replica whenever a deployment's routing changes (drain, revision, unload), so a relay cache can drop it at once. */
  onChange(listener: (deploymentId: string) => void): () => void;
}

const upper = (p: string) => p.toUpperCase() as DeploymentPhase;

/** What a route is made from: a deployment and each of its instances with its profile's engine. */
export interface RoutedDeployment {
  id: string;
  name: string;
  desired: string;
  revision: bigint;
  replicas: number;
  createdAt: Date;
  maxInFlight: number;
  invokeTimeoutMs: number;
  autoscale: boolean;
  coldStartTimeoutMs: number;
  instances: {
    revision: bigint;
    replica: number;
    phase: string;
    nodeId: string | null;
    engine: string;
    embeddings: boolean;
    runtimeId: string | null;
  }[];
}

export function targetOf(d: RoutedDeployment): DeploymentTarget {
  const desired = d.desired as Desired;
  const phases = d.instances.map((i) => ({ revision: i.revision, replica: i.replica, phase: i.phase as Phase }));
  const ready =
    desired === "serving"
      ? d.instances
          .filter((i): i is RoutedDeployment["instances"][number] & { nodeId: string } => i.phase === "ready" && i.nodeId !== null)
          .sort(newestRevisionFirst)
          .map((i) => ({
            revision: i.revision,
            replica: i.replica,
            nodeId: i.nodeId,
            phase: "READY" as const,
            engine: i.engine,
            embeddings: i.embeddings,
            runtimeId: i.runtimeId ?? "",
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
    ...(desired === "serving" && d.autoscale ? { coldStart: { timeoutMs: d.coldStartTimeoutMs, replicas: d.replicas } } : {}),
  };
}

export function deploymentRoutes(
  prisma: PrismaClient,
  direct: DirectQuery,
  changes: { onChange(listener: (deploymentId: string) => void): () => void },
): DeploymentRoutes {
  return {
    async find(idOrName) {
      const rows = isUuid(idOrName)
        ? await direct<RouteRow>(routeById, [idOrName.toLowerCase()])
        : await direct<RouteRow>(routeByName, [idOrName]);
      return rows.length === 0 ? undefined : targetOf(routedOf(rows));
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
      return rows.map((d) => targetOf(withEngines(d, engines)));
    },
    onChange: (listener) => changes.onChange(listener),
  };
}

// The relay reads a route on its request path (when its cached copy has expired, every second per
// deployment), so the read goes straight on the driver (../db/direct.ts) as one statement: through
// Prisma it was three queries and, on PGlite, about 2.5 ms of the event loop that serves requests
// against 0.13 ms here (on PostgreSQL about 1.2 ms of CPU against 0.13). One row per instance (one
// row of nulls for a deployment without any); int8 goes as text, which both drivers parse alike.
const routeColumns = `d.id::text AS id, d.name, d.desired, d.revision::text AS revision, d.replicas, d."createdAt",
       d."maxInFlight", d."invokeTimeoutMs", d.autoscale, d."coldStartTimeoutMs", i.revision::text AS "instanceRevision", i.replica AS "instanceReplica",
       i.phase AS "instancePhase", i."nodeId"::text AS "instanceNodeId", p.engine AS "instanceEngine",
       p.embeddings AS "instanceEmbeddings", i."runtimeId" AS "instanceRuntimeId"
  FROM "Deployment" AS d
  LEFT JOIN "DeploymentInstance" AS i ON i."deploymentId" = d.id
  LEFT JOIN "RuntimeProfile" AS p ON p.name = i."runtimeProfile"`;
const routeById: DirectStatement = {
  name: "mf_route_by_id",
  text: `SELECT ${routeColumns}\n WHERE d.id = $1::uuid AND d.desired <> 'deleted'`,
};
const routeByName: DirectStatement = {
  name: "mf_route_by_name",
  text: `SELECT ${routeColumns}\n WHERE d.name = $1 AND d.desired <> 'deleted'`,
};

interface RouteRow {
  id: string;
  name: string;
  desired: string;
  revision: string;
  replicas: number;
  createdAt: Date;
  maxInFlight: number;
  invokeTimeoutMs: number;
  autoscale: boolean;
  coldStartTimeoutMs: number;
  instanceRevision: string | null;
  instanceReplica: number | null;
  instancePhase: string | null;
  instanceNodeId: string | null;
  instanceEngine: string | null;
  instanceEmbeddings: boolean | null;
  instanceRuntimeId: string | null;
}

/** One deployment's rows (at least one) as the deployment they describe. */
function routedOf(rows: RouteRow[]): RoutedDeployment {
  const d = rows[0]!;
  return {
    id: d.id,
    name: d.name,
    desired: d.desired,
    revision: BigInt(d.revision),
    replicas: d.replicas,
    createdAt: d.createdAt,
    maxInFlight: d.maxInFlight,
    invokeTimeoutMs: d.invokeTimeoutMs,
    autoscale: d.autoscale,
    coldStartTimeoutMs: d.coldStartTimeoutMs,
    instances: rows
      .filter((r) => r.instanceRevision !== null)
      .map((r) => ({
        revision: BigInt(r.instanceRevision!),
        replica: r.instanceReplica!,
        phase: r.instancePhase!,
        nodeId: r.instanceNodeId,
        // A profile deleted since (or never stored) names no engine.
        engine: r.instanceEngine ?? "",
        embeddings: r.instanceEmbeddings === true,
        runtimeId: r.instanceRuntimeId,
      })),
  };
}

/** Engines (and whether embeddings are on) by runtime profile name. */
type ProfileEngines = ReadonlyMap<string, { engine: string; embeddings: boolean }>;

function withEngines(d: Deployment & { instances: DeploymentInstance[] }, engines: ProfileEngines): RoutedDeployment {
  return {
    ...d,
    instances: d.instances.map((i) => {
      const p = engines.get(i.runtimeProfile);
      return { ...i, engine: p?.engine ?? "", embeddings: p?.embeddings === true };
    }),
  };
}

/** The engines of the runtime profiles these deployments' instances name, in one query. */
async function profileEngines(prisma: PrismaClient, rows: { instances: DeploymentInstance[] }[]): Promise<ProfileEngines> {
  const names = [...new Set(rows.flatMap((d) => d.instances.map((i) => i.runtimeProfile)))];
  if (names.length === 0) return new Map();
  const profiles = await prisma.runtimeProfile.findMany({
    where: { name: { in: names } },
    select: { name: true, engine: true, embeddings: true },
  });
  return new Map(profiles.map((p) => [p.name, { engine: p.engine, embeddings: p.embeddings }]));
}
