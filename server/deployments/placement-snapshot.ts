// The I/O around placement.ts: reads the fleet (nodes, their latest telemetry, the replicas they
// hold and what those need) and the replica's own need, then asks the pure rules.
import { fromJson, type JsonValue } from "@bufbuild/protobuf";
import type { PrismaClient } from "../../gen/prisma/client.js";
import { TelemetrySchema } from "../../gen/proto/modelforge/common/v1/common_pb.js";
import type { Clock } from "../../common/clock.js";
import { commitEstimate, memoryNeed, replicaParallel, storedEstimate, type MemoryEstimate } from "../artifacts/memory.js";
import { nodeLoss, type LossBounds } from "./node-loss.js";
import { place, type NodeTelemetryView, type NodeView, type Placement, type PlacedView } from "./placement.js";
import { evictionCandidates, type EvictionDeps } from "./eviction.js";
import { evictionOrder, noEvictionReason, type EvictionCandidate } from "./eviction-rules.js";
import type { GpuNeed } from "./gpu-fit.js";

/** Disk kept free on the target root beyond the commit's files (logs, temp files, the next commit). */
const DISK_RESERVE_BYTES = 512 * 2 ** 20;

/** Replicas in these phases hold (or are about to hold) their node's memory. */
export const HOLDING = ["loading", "ready", "draining"];

export interface PlacementDeps {
  prisma: PrismaClient;
  clock: Clock;
  /** Which nodes are lost to replicas (./node-loss.ts): they take none. */
  loss: LossBounds;
  /** Where idle replicas to evict are found; without it, a replica that fits nowhere just waits. */
  eviction?: EvictionDeps;
}

/**
 * A node for the replica, with the replicas the snapshot saw holding room on it ("deployment/
 * revision/replica"): the placement is stored only if none has been placed there since. Else why
 * none fits, perhaps with a replica of another deployment to evict first to make room.
 */
export type PlacementChoice =
  | (Extract<Placement, { nodeId: string }> & { seen: ReadonlySet<string> })
  | { pending: string }
  | { pending: string; evict: EvictionCandidate };

/** How a replica holding room on a node is named in PlacementChoice's `seen`. */
export const holdingKey = (i: { deploymentId: string; revision: bigint; replica: number }) =>
  `${i.deploymentId}/${i.revision}/${i.replica}`;

export interface PlacementInput {
  deploymentId: string;
  revision: bigint;
  /** The node the deployment is pinned to; "" to choose by selector. */
  nodeId: string;
  maxPerNode: number;
  selector: { [key: string]: string };
  engine: string;
  capabilities: string[];
  runtimeProfile: string;
  repository: string;
  commit: string;
  /** The file the runtime loads ("" for the commit's single GGUF). */
  modelFile: string;
  targetRoot: string;
  /** The deployment's priority: idle replicas of this priority or lower may be evicted for it. */
  priority: number;
}

export interface Served {
  repository: string;
  commit: string;
  modelFile: string;
  runtimeProfile: string;
}

interface Need {
  /** RAM; undefined when unknown. */
  memory: number | undefined;
  /** GPUs; undefined for a CPU profile. */
  gpu: GpuNeed | undefined;
}

/**
 * What each (repository, commit, model file, profile) needs in RAM and of GPUs. On each GPU an
 * openai-http server takes what its profile declares; llama.cpp's estimate is split evenly across
 * its GPUs (for a partial offload that overstates the GPUs' share: fail toward not overcommitting).
 */
async function needs(prisma: PrismaClient, wanted: Served[]): Promise<(key: Served) => Need> {
  const memoryOf = await memoryNeeds(prisma, wanted);
  const profiles = await prisma.runtimeProfile.findMany({
    where: { name: { in: wanted.map((w) => w.runtimeProfile) } },
    select: { name: true, engine: true, gpuCount: true, gpuMemoryBytes: true, gpuShared: true },
  });
  const profile = new Map(profiles.map((p) => [p.name, p]));
  return (key) => {
    const memory = memoryOf(key);
    const p = profile.get(key.runtimeProfile);
    if (p === undefined || p.gpuCount === 0) return { memory, gpu: undefined };
    const onEach =
      p.engine === "openai-http" ? Number(p.gpuMemoryBytes) : memory === undefined ? undefined : Math.ceil(memory / p.gpuCount);
    return { memory, gpu: { count: p.gpuCount, memoryBytes: onEach, shared: p.gpuShared } };
  };
}

type ProfileRow = Awaited<ReturnType<PrismaClient["runtimeProfile"]["findMany"]>>[number];

/** Each served (repository, commit, model file, profile)'s profile row and its model's estimate. */
async function estimatesOf(
  prisma: PrismaClient,
  wanted: Served[],
): Promise<(key: Served) => { profile: ProfileRow; estimate: MemoryEstimate | undefined } | undefined> {
  const [files, profiles] = await Promise.all([
    prisma.storedArtifact.findMany({
      where: { OR: wanted.map((w) => ({ repository: w.repository, commit: w.commit })) },
      select: {
        repository: true,
        commit: true,
        path: true,
        estimatedWeightsBytes: true,
        estimatedKvBytesPerToken: true,
        estimatedContextLength: true,
      },
    }),
    prisma.runtimeProfile.findMany({ where: { name: { in: wanted.map((w) => w.runtimeProfile) } } }),
  ]);
  const profile = new Map(profiles.map((p) => [p.name, p]));
  return (key) => {
    const p = profile.get(key.runtimeProfile);
    if (p === undefined) return undefined;
    const ofCommit = files.filter((f) => f.repository === key.repository && f.commit === key.commit);
    const estimate = commitEstimate(
      ofCommit.map((f) => ({ path: f.path, estimate: storedEstimate(f) })),
      key.modelFile,
    );
    return { profile: p, estimate };
  };
}

/** What each (repository, commit, model file, profile) needs in RAM; undefined when unknown. */
async function memoryNeeds(prisma: PrismaClient, wanted: Served[]): Promise<(key: Served) => number | undefined> {
  const of = await estimatesOf(prisma, wanted);
  return (key) => {
    const found = of(key);
    if (found === undefined) return undefined;
    const { profile: p, estimate } = found;
    // An openai-http runtime's model lives in a server of its own: it takes what its profile
    // declares (0 when that server runs elsewhere).
    if (p.engine === "openai-http") return Number(p.memoryBytes);
    return estimate === undefined ? undefined : memoryNeed(estimate, p.contextSize, replicaParallel(p.parallel, estimate, p.contextSize));
  };
}

/**
 * The requests a replica generates at once, as placement priced it: the profile's parallel, or
 * the rule's choice for the model (deployment.load.v1 carries it to the agent). 0 for an engine
 * that schedules its own (openai-http) or a profile that is gone.
 */
export async function replicaParallelOf(prisma: PrismaClient, served: Served): Promise<number> {
  const found = (await estimatesOf(prisma, [served]))(served);
  if (found === undefined || found.profile.engine !== "llama.cpp") return 0;
  return replicaParallel(found.profile.parallel, found.estimate, found.profile.contextSize);
}

/**
 * RAM available (within the node's model memory bound, when its operator set one) and free bytes
 * per mount from the stored common.v1.Telemetry; undefined when unusable.
 */
function telemetryOf(data: unknown): (NodeTelemetryView & { gpuUsedBytes: Map<string, bigint> }) | undefined {
  try {
    const t = fromJson(TelemetrySchema, data as JsonValue, { ignoreUnknownFields: true });
    if (t.memoryTotalBytes === 0n) return undefined;
    const free = Number(t.memoryTotalBytes - t.memoryUsedBytes);
    return {
      memoryAvailableBytes: t.modelMemoryBytes > 0n ? Math.min(free, Number(t.modelMemoryBytes)) : free,
      mounts: t.mounts.map((m) => ({ mount: m.mount, freeBytes: Number(m.sizeBytes - m.usedBytes) })),
      gpuUsedBytes: new Map(t.gpus.map((g) => [g.uuid, g.memoryUsedBytes])),
    };
  } catch {
    return undefined;
  }
}

/** What placement reads of each replica holding room on a node. */
const holdingSelect = {
  deploymentId: true,
  revision: true,
  replica: true,
  nodeId: true,
  repository: true,
  commit: true,
  modelFile: true,
  runtimeProfile: true,
  gpuUuids: true,
  phase: true,
} as const;

/** The node a replica of the deployment goes on, or why none fits, with the numbers. */
export async function placeReplica(deps: PlacementDeps, input: PlacementInput): Promise<PlacementChoice> {
  const { prisma } = deps;
  const named = input.nodeId.toLowerCase();
  const rows = await prisma.node.findMany({
    where: named !== "" ? { id: named } : { lastHeartbeatAt: { not: null }, decommissionedAt: null },
    select: {
      id: true,
      labels: true,
      engines: true,
      capabilities: true,
      disabledAt: true,
      decommissionedAt: true,
      lastHeartbeatAt: true,
      sessionReplica: true,
      telemetry: { select: { data: true } },
    },
  });
  const placed = await prisma.deploymentInstance.findMany({
    where: { nodeId: { in: rows.map((n) => n.id) }, phase: { in: HOLDING } },
    select: holdingSelect,
  });
  // Only GPUs present by the inventory are offered: a missing one is nobody's to assign.
  const gpuRows = await prisma.gpu.findMany({
    where: { nodeId: { in: rows.map((n) => n.id) }, state: "present" },
    select: { nodeId: true, uuid: true, index: true, memoryTotalBytes: true },
    orderBy: { index: "asc" },
  });
  const need = await needs(prisma, [...placed, input]);
  const files = await prisma.storedArtifact.aggregate({
    where: { repository: input.repository, commit: input.commit },
    _sum: { sizeBytes: true },
  });
  const now = deps.clock.now();
  const nodes: NodeView[] = rows.map((n) => {
    const telemetry = n.telemetry === null ? undefined : telemetryOf(n.telemetry.data);
    return {
      id: n.id,
      // The same rule that takes replicas off a node: one whose session closed is no place for a new one.
      online: nodeLoss({ ...n, disabledAt: null, decommissionedAt: null }, now, deps.loss) === undefined,
      disabled: n.disabledAt !== null,
      decommissioned: n.decommissionedAt !== null,
      labels: (n.labels ?? {}) as { [key: string]: unknown },
      engines: n.engines,
      capabilities: n.capabilities,
      telemetry,
      placed: placed
        .filter((p) => p.nodeId === n.id)
        .map((p) => {
          const { memory, gpu } = need(p);
          return {
            deploymentId: p.deploymentId,
            revision: p.revision,
            memoryBytes: memory,
            ...(p.phase === "draining" ? { draining: true } : {}),
            ...(p.gpuUuids.length > 0 ? { gpus: { uuids: p.gpuUuids, memoryBytes: gpu?.memoryBytes, shared: gpu?.shared ?? false } } : {}),
          };
        }),
      gpus: gpuRows
        .filter((g) => g.nodeId === n.id)
        .map((g) => {
          const used = telemetry?.gpuUsedBytes.get(g.uuid);
          return { uuid: g.uuid, index: g.index, freeBytes: used === undefined ? undefined : Number(g.memoryTotalBytes - used) };
        }),
    };
  });
  const wanted = need(input);
  const request: Parameters<typeof place>[1] = {
    deploymentId: input.deploymentId,
    revision: input.revision,
    ...(named !== "" ? { nodeId: named } : {}),
    selector: input.selector,
    // A llama.cpp replica given GPUs offloads layers: only a node whose llama.cpp has CUDA will do.
    engine: input.engine === "llama.cpp" && wanted.gpu !== undefined ? "llama.cpp+cuda" : input.engine,
    capabilities: input.capabilities,
    targetRoot: input.targetRoot,
    diskBytes: Number(files._sum.sizeBytes ?? 0n) + DISK_RESERVE_BYTES,
    memoryBytes: wanted.memory,
    maxPerNode: input.maxPerNode,
    ...(wanted.gpu !== undefined ? { gpu: wanted.gpu } : {}),
  };
  const placement = place(nodes, request);
  if (!("pending" in placement)) {
    return { ...placement, seen: new Set(placed.filter((p) => p.nodeId === placement.nodeId).map(holdingKey)) };
  }
  if (deps.eviction === undefined) return placement;
  return placeByEviction(deps.eviction, input, nodes, request, placement.pending);
}

/** The nodes with some of their replicas taken out of the view. */
const without = (nodes: NodeView[], out: (n: NodeView, p: PlacedView, i: number) => boolean): NodeView[] =>
  nodes.map((n) => ({ ...n, placed: n.placed.filter((p, i) => !out(n, p, i)) }));

/**
 * A replica that fits nowhere as things stand: if replicas already draining will free enough, it
 * waits for them (nothing more is evicted meanwhile, so one eviction is never followed by another
 * for the same room); else the first idle replica, in eviction order, whose room alone would let it
 * fit on that replica's node; else it waits, its reason saying why eviction could not help.
 */
async function placeByEviction(
  deps: EvictionDeps,
  input: PlacementInput,
  nodes: NodeView[],
  request: Parameters<typeof place>[1],
  pending: string,
): Promise<PlacementChoice> {
  if (
    !(
      "pending" in
      place(
        without(nodes, (_, p) => p.draining === true),
        request,
      )
    )
  ) {
    return { pending: `${pending}; waiting for draining replicas to free room` };
  }
  const found = await evictionCandidates(
    deps,
    { deploymentId: input.deploymentId, priority: input.priority },
    nodes.map((n) => n.id),
  );
  const candidates = evictionOrder(found.candidates);
  for (const c of candidates) {
    const once = (n: NodeView) => n.placed.findIndex((p) => p.deploymentId === c.deploymentId && p.revision === c.revision);
    const freed = place(
      without(nodes, (n, _, i) => n.id === c.nodeId && i === once(n)),
      request,
    );
    if (!("pending" in freed) && freed.nodeId === c.nodeId) {
      return { pending: `${pending}; evicting ${c.name}'s idle replica on node ${c.nodeId} to make room`, evict: c };
    }
  }
  const why = noEvictionReason(candidates.length, found.considered);
  return { pending: why === undefined ? pending : `${pending}; ${why}` };
}
