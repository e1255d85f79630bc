// The I/O around placement.ts: reads the fleet (nodes, their latest telemetry, the deployments they
// hold and what those need) and the request's own need, then asks the pure rules. Refuses with
// failed_precondition and the rules' reason when nothing fits.
import { fromJson, type JsonValue } from "@bufbuild/protobuf";
import { Code, ConnectError } from "@connectrpc/connect";
import type { PrismaClient } from "../../gen/prisma/client.js";
import { TelemetrySchema } from "../../gen/proto/modelforge/common/v1/common_pb.js";
import type { Clock } from "../../common/clock.js";
import { commitEstimate, memoryNeed, storedEstimate } from "../artifacts/memory.js";
import { place, type NodeTelemetryView, type NodeView } from "./placement.js";

/** Disk kept free on the target root beyond the commit's files (logs, temp files, the next commit). */
const DISK_RESERVE_BYTES = 512 * 2 ** 20;

/** Deployments in these desired states hold their node's memory (drained ones stay loaded). */
const HOLDING = ["serving", "drained"];

export interface PlacementDeps {
  prisma: PrismaClient;
  clock: Clock;
  /** A node is online while its last heartbeat is at most this old. */
  staleAfterMs: number;
}

export interface PlacementInput {
  deploymentId: string;
  nodeId: string;
  selector: { [key: string]: string };
  engine: string;
  capabilities: string[];
  runtimeProfile: string;
  repository: string;
  commit: string;
  /** The file the runtime loads ("" for the commit's single GGUF). */
  modelFile: string;
  targetRoot: string;
}

interface Served {
  repository: string;
  commit: string;
  modelFile: string;
  runtimeProfile: string;
}

/** What each (repository, commit, model file, profile) needs in RAM; undefined when unknown. */
async function needs(prisma: PrismaClient, wanted: Served[]): Promise<(key: Served) => number | undefined> {
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
    // An openai-http runtime's model lives in a server of its own: it takes what its profile
    // declares (0 when that server runs elsewhere).
    if (p.engine === "openai-http") return Number(p.memoryBytes);
    const ofCommit = files.filter((f) => f.repository === key.repository && f.commit === key.commit);
    const estimate = commitEstimate(
      ofCommit.map((f) => ({ path: f.path, estimate: storedEstimate(f) })),
      key.modelFile,
    );
    return estimate === undefined ? undefined : memoryNeed(estimate, p.contextSize);
  };
}

/** RAM available and free bytes per mount from the stored common.v1.Telemetry; undefined when unusable. */
function telemetryOf(data: unknown): NodeTelemetryView | undefined {
  try {
    const t = fromJson(TelemetrySchema, data as JsonValue, { ignoreUnknownFields: true });
    if (t.memoryTotalBytes === 0n) return undefined;
    return {
      memoryAvailableBytes: Number(t.memoryTotalBytes - t.memoryUsedBytes),
      mounts: t.mounts.map((m) => ({ mount: m.mount, freeBytes: Number(m.sizeBytes - m.usedBytes) })),
    };
  } catch {
    return undefined;
  }
}

/** The node a replica of the deployment goes on; failed_precondition naming the numbers when none fits. */
export async function chooseNode(deps: PlacementDeps, input: PlacementInput): Promise<string> {
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
      telemetry: { select: { data: true } },
      deployments: {
        where: { desired: { in: HOLDING } },
        select: { id: true, repository: true, commit: true, modelFile: true, runtimeProfile: true },
      },
    },
  });
  if (named !== "" && rows.length === 0) throw new ConnectError(`node ${input.nodeId} not found`, Code.NotFound);
  const placed = rows.flatMap((n) => n.deployments);
  const need = await needs(prisma, [...placed, input]);
  const files = await prisma.storedArtifact.aggregate({
    where: { repository: input.repository, commit: input.commit },
    _sum: { sizeBytes: true },
  });
  const now = deps.clock.now();
  const nodes: NodeView[] = rows.map((n) => ({
    id: n.id,
    online: n.lastHeartbeatAt !== null && now - n.lastHeartbeatAt.getTime() <= deps.staleAfterMs,
    disabled: n.disabledAt !== null,
    decommissioned: n.decommissionedAt !== null,
    labels: (n.labels ?? {}) as { [key: string]: unknown },
    engines: n.engines,
    capabilities: n.capabilities,
    telemetry: n.telemetry === null ? undefined : telemetryOf(n.telemetry.data),
    placed: n.deployments.map((d) => ({ deploymentId: d.id, memoryBytes: need(d) })),
  }));
  const placement = place(nodes, {
    deploymentId: input.deploymentId,
    ...(named !== "" ? { nodeId: named } : {}),
    selector: input.selector,
    engine: input.engine,
    capabilities: input.capabilities,
    targetRoot: input.targetRoot,
    diskBytes: Number(files._sum.sizeBytes ?? 0n) + DISK_RESERVE_BYTES,
    memoryBytes: need(input),
  });
  if ("pending" in placement) throw new ConnectError(`no node fits: ${placement.pending}`, Code.FailedPrecondition);
  return placement.nodeId;
}
