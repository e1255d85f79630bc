// Where one replica of a deployment goes: pure rules over a snapshot of the fleet. The controller's
// I/O layer (placement-snapshot.ts) builds the snapshot; replicas call this once each, with the
// replicas already placed in the snapshot, so spreading falls out of the score.
//
// Filters, in order, each node counted against the first it fails: online and enabled and not
// decommissioned; the selector's labels; engine and capabilities; disk on the target root; memory;
// then, for a replica that needs GPUs, the node's GPUs (./gpu-fit.ts picks them with the node).
// Telemetry that is missing is unknown, and unknown never fits (fail closed).
import { assignGpus, type GpuNeed, type GpuView, type PlacedGpus } from "./gpu-fit.js";

export interface NodeTelemetryView {
  /** RAM the node reports available (total less used, page cache counted as free). */
  memoryAvailableBytes: number;
  mounts: { mount: string; freeBytes: number }[];
}

export interface PlacedView {
  deploymentId: string;
  /** Its revision: a rollout's new replica may share a node with an old one it replaces. */
  revision?: bigint;
  /** What it holds in RAM by its estimate; undefined when that is unknown. */
  memoryBytes: number | undefined;
  /** The GPUs it was assigned, and what it holds on each; absent for a CPU replica. */
  gpus?: PlacedGpus;
  /** It is draining: its room is freed once it unloads. */
  draining?: boolean;
}

export interface NodeView {
  id: string;
  online: boolean;
  disabled: boolean;
  decommissioned: boolean;
  labels: { [key: string]: unknown };
  engines: string[];
  capabilities: string[];
  telemetry: NodeTelemetryView | undefined;
  /** Deployments (replicas) already on the node that hold memory. */
  placed: PlacedView[];
  /** Its GPUs present by the inventory, with their free memory by telemetry; absent for none. */
  gpus?: GpuView[];
}

export interface PlacementRequest {
  /** Its replicas (of this revision) already placed are spread away from. */
  deploymentId: string;
  revision?: bigint;
  /** Only this node is considered when set (the selector is then not asked). */
  nodeId?: string;
  selector: { [key: string]: string };
  engine: string;
  capabilities: string[];
  targetRoot: string;
  /** The commit's size plus the reserve to keep free. */
  diskBytes: number;
  /** RAM the replica needs; undefined when unknown (then nothing fits). */
  memoryBytes: number | undefined;
  /** At most this many of the deployment's replicas on one node (1 unless the operator allows more). */
  maxPerNode?: number;
  /** The GPUs it needs; absent for a CPU replica. */
  gpu?: GpuNeed;
}

/** A GPU chosen for the replica: its UUID and index, as the node reported them. */
export interface ChosenGpu {
  uuid: string;
  index: number;
}

export type Placement = { nodeId: string; gpus: ChosenGpu[] } | { pending: string };

/** The filesystem holding `path`: the longest mount that is a prefix of it at a path boundary. */
export function mountOf(path: string, mounts: { mount: string; freeBytes: number }[]): { mount: string; freeBytes: number } | undefined {
  const holds = (m: string) => m === "/" || path === m || path.startsWith(m.endsWith("/") ? m : `${m}/`);
  return mounts.filter((m) => holds(m.mount)).sort((a, b) => b.mount.length - a.mount.length)[0];
}

/** RAM free for another deployment: available less what the other deployments' estimates hold. */
export function memoryFree(node: NodeView): number | undefined {
  if (node.telemetry === undefined || node.placed.some((p) => p.memoryBytes === undefined)) return undefined;
  return node.telemetry.memoryAvailableBytes - node.placed.reduce((sum, p) => sum + (p.memoryBytes ?? 0), 0);
}

/** Bytes for people: "6.2 GiB", "300.0 MiB", "512 B"; negative when estimates overcommit a node. */
export function size(bytes: number): string {
  const abs = Math.abs(bytes);
  for (const [unit, scale] of [
    ["GiB", 2 ** 30],
    ["MiB", 2 ** 20],
    ["KiB", 2 ** 10],
  ] as const) {
    if (abs >= scale) return `${(bytes / scale).toFixed(1)} ${unit}`;
  }
  return `${bytes} B`;
}

/** Joins "3.1", "3.1 and 3.4", "3.1, 3.3 and 3.4". */
function listed(items: string[]): string {
  return items.length <= 1 ? (items[0] ?? "") : `${items.slice(0, -1).join(", ")} and ${items.at(-1)}`;
}

/** The nodes failing one filter, and how to say so. */
interface Refusals {
  notServing: number;
  labels: number;
  engine: number;
  capabilities: number;
  spread: number;
  noTelemetry: number;
  disk: number[];
  memoryUnknown: number;
  memory: number[];
  /** GPUs each refused node has free of other replicas, when fewer than needed. */
  gpuCount: number[];
  gpuUnknown: number;
  /** Per refused node: the free memory of the needed-th emptiest GPU it may use. */
  gpuMemory: number[];
}

type Verdict =
  | { fits: true; memoryFree: number; gpus: ChosenGpu[] }
  | { fits: false; why: Exclude<keyof Refusals, "disk" | "memory" | "gpuCount" | "gpuMemory"> }
  | { fits: false; why: "disk" | "memory" | "gpuCount" | "gpuMemory"; free: number };

function judge(node: NodeView, req: PlacementRequest): Verdict {
  if (!node.online || node.disabled || node.decommissioned) return { fits: false, why: "notServing" };
  if (req.nodeId === undefined && !Object.entries(req.selector).every(([k, v]) => node.labels[k] === v)) {
    return { fits: false, why: "labels" };
  }
  if (!node.engines.includes(req.engine)) return { fits: false, why: "engine" };
  if (!req.capabilities.every((c) => node.capabilities.includes(c))) return { fits: false, why: "capabilities" };
  if (replicasOn(node, req) >= (req.maxPerNode ?? 1)) return { fits: false, why: "spread" };
  if (node.telemetry === undefined) return { fits: false, why: "noTelemetry" };
  const disk = mountOf(req.targetRoot, node.telemetry.mounts);
  if (disk === undefined || disk.freeBytes < req.diskBytes) return { fits: false, why: "disk", free: disk?.freeBytes ?? 0 };
  const free = memoryFree(node);
  if (free === undefined || req.memoryBytes === undefined) return { fits: false, why: "memoryUnknown" };
  if (free < req.memoryBytes) return { fits: false, why: "memory", free };
  if (req.gpu === undefined) return { fits: true, memoryFree: free, gpus: [] };
  const gpus = assignGpus(node.gpus ?? [], node.placed, req.gpu);
  if ("why" in gpus)
    return gpus.why === "gpuUnknown" ? { fits: false, why: "gpuUnknown" } : { fits: false, why: gpus.why, free: gpus.free };
  return { fits: true, memoryFree: free, gpus: gpus.chosen };
}

/** How many replicas of the deployment's revision the node holds already. */
const replicasOn = (node: NodeView, req: Pick<PlacementRequest, "deploymentId" | "revision">) =>
  node.placed.filter((p) => p.deploymentId === req.deploymentId && p.revision === req.revision).length;

/** "1 lacks" but "2 lack": the count and its verb. */
const count = (n: number, one: string, many: string) => `${n} ${n === 1 ? one : many}`;

function reasonOf(considered: number, r: Refusals, req: PlacementRequest): string {
  const sorted = (xs: number[]) => listed([...xs].sort((a, b) => a - b).map(size));
  const parts = [
    req.nodeId !== undefined ? `node ${req.nodeId}` : `${considered - r.notServing} online`,
    r.notServing > 0 && `${count(r.notServing, "is", "are")} offline, disabled or decommissioned`,
    r.labels > 0 && `${count(r.labels, "lacks", "lack")} labels ${JSON.stringify(req.selector)}`,
    r.engine > 0 && `${count(r.engine, "lacks", "lack")} engine ${req.engine}`,
    r.capabilities > 0 && `${count(r.capabilities, "lacks", "lack")} capabilities ${req.capabilities.join(", ")}`,
    r.spread > 0 && `${count(r.spread, "holds", "hold")} ${req.maxPerNode ?? 1} of its replicas already (max_per_node)`,
    r.noTelemetry > 0 && `${count(r.noTelemetry, "has", "have")} sent no telemetry yet, so disk and memory are unknown`,
    r.disk.length > 0 && `${count(r.disk.length, "has", "have")} ${sorted(r.disk)} free on ${req.targetRoot}, needs ${size(req.diskBytes)}`,
    r.memoryUnknown > 0 &&
      (req.memoryBytes === undefined
        ? `the model's memory need is unknown (no GGUF estimate), so it fits none of the ${r.memoryUnknown} left`
        : `${count(r.memoryUnknown, "holds", "hold")} deployments of unknown memory`),
    r.memory.length > 0 &&
      `${count(r.memory.length, "has", "have")} ${sorted(r.memory)} of memory free, needs ${size(req.memoryBytes ?? 0)}`,
    r.gpuCount.length > 0 &&
      `${count(r.gpuCount.length, "has", "have")} ${listed([...r.gpuCount].sort((a, b) => a - b).map(String))} ${
        r.gpuCount.every((n) => n === 1) ? "GPU" : "GPUs"
      } it may use (present and not held by another replica${req.gpu?.shared ? " that does not share" : ""}), needs ${req.gpu?.count}`,
    r.gpuUnknown > 0 &&
      (req.gpu?.memoryBytes === undefined
        ? `the model's GPU memory need is unknown (no GGUF estimate), so it fits none of the ${r.gpuUnknown} left`
        : `${count(r.gpuUnknown, "has", "have")} GPUs of unknown free memory (no GPU telemetry, or replicas of unknown need)`),
    r.gpuMemory.length > 0 &&
      `${count(r.gpuMemory.length, "has", "have")} ${sorted(r.gpuMemory)} of GPU memory free on ${
        req.gpu?.count === 1 ? "the emptiest GPU" : `each of the ${req.gpu?.count} emptiest GPUs`
      }, needs ${size(req.gpu?.memoryBytes ?? 0)}${req.gpu?.count === 1 ? "" : " on each"}`,
  ];
  const said = parts.filter((p): p is string => typeof p === "string");
  // One named node: "node n2: has 2.0 GiB of memory free, needs 6.2 GiB".
  if (req.nodeId !== undefined)
    return `${said[0]}: ${said
      .slice(1)
      .map((p) => p.replace(/^1 /, ""))
      .join("; ")}`;
  return said.join("; ");
}

/** The node for one replica, or why none fits. */
export function place(nodes: readonly NodeView[], req: PlacementRequest): Placement {
  const considered = req.nodeId === undefined ? nodes : nodes.filter((n) => n.id === req.nodeId);
  const refusals: Refusals = {
    notServing: 0,
    labels: 0,
    engine: 0,
    capabilities: 0,
    spread: 0,
    noTelemetry: 0,
    disk: [],
    memoryUnknown: 0,
    memory: [],
    gpuCount: [],
    gpuUnknown: 0,
    gpuMemory: [],
  };
  const fitting: { node: NodeView; memoryFree: number; gpus: ChosenGpu[] }[] = [];
  for (const node of considered) {
    const v = judge(node, req);
    if (v.fits) fitting.push({ node, memoryFree: v.memoryFree, gpus: v.gpus });
    else if ("free" in v) refusals[v.why].push(v.free);
    else refusals[v.why] += 1;
  }
  if (fitting.length === 0) {
    if (considered.length === 0) return { pending: req.nodeId !== undefined ? `node ${req.nodeId} is not known` : "no nodes are known" };
    return { pending: reasonOf(considered.length, refusals, req) };
  }
  const mine = (n: NodeView) => replicasOn(n, req);
  // Spread this deployment's replicas, then the least loaded, then the most memory left; the id
  // breaks ties so the same snapshot always gives the same node.
  fitting.sort(
    (a, b) =>
      mine(a.node) - mine(b.node) ||
      a.node.placed.length - b.node.placed.length ||
      b.memoryFree - a.memoryFree ||
      (a.node.id < b.node.id ? -1 : a.node.id > b.node.id ? 1 : 0),
  );
  return { nodeId: fitting[0]!.node.id, gpus: fitting[0]!.gpus };
}
