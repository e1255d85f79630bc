// Which of a node's GPUs a replica gets: pure rules, asked by placement.ts once a node passed every
// other filter, so the node and its GPUs are chosen together.
//
// A GPU is usable when no other replica holds it, or when every replica holding it and this one
// allow sharing. Its free memory is what the node's telemetry says is free, less what the replicas
// assigned to it hold by their need (their own use may already be in the telemetry: counting it
// twice errs toward not overcommitting a GPU, as the RAM fit does). Unknown never fits.

/** One GPU of a node, present by its inventory. */
export interface GpuView {
  uuid: string;
  index: number;
  /** Total less used by the latest telemetry; undefined when the telemetry does not name it. */
  freeBytes: number | undefined;
}

/** The GPUs a placed replica was assigned, and what it holds on each. */
export interface PlacedGpus {
  uuids: string[];
  /** Device memory it needs on each; undefined when unknown. */
  memoryBytes: number | undefined;
  shared: boolean;
}

/** What a replica needs of a node's GPUs. */
export interface GpuNeed {
  count: number;
  /** Device memory on each GPU; undefined when unknown (then nothing fits). */
  memoryBytes: number | undefined;
  /** It may share a GPU with replicas that allow it too. */
  shared: boolean;
}

export type GpuFit =
  | { chosen: { uuid: string; index: number }[] }
  | { why: "gpuCount"; free: number }
  | { why: "gpuUnknown" }
  | { why: "gpuMemory"; free: number };

/**
 * The GPUs for one replica on one node: the `need.count` usable GPUs with the most memory free
 * (index breaks ties, so a snapshot always gives the same answer), or why there are none: too few
 * usable GPUs (`free` is how many there are), memory unknown, or too little memory (`free` is that
 * of the count-th emptiest usable GPU, the one that decides).
 */
export function assignGpus(gpus: readonly GpuView[], placed: readonly { gpus?: PlacedGpus }[], need: GpuNeed): GpuFit {
  const usable: { gpu: GpuView; free: number | undefined }[] = [];
  for (const gpu of gpus) {
    const holders = placed.flatMap((p) => (p.gpus?.uuids.includes(gpu.uuid) ? [p.gpus] : []));
    if (holders.length > 0 && (!need.shared || holders.some((h) => !h.shared))) continue;
    const held = holders.reduce<number | undefined>(
      (sum, h) => (sum === undefined || h.memoryBytes === undefined ? undefined : sum + h.memoryBytes),
      0,
    );
    usable.push({ gpu, free: gpu.freeBytes === undefined || held === undefined ? undefined : gpu.freeBytes - held });
  }
  if (usable.length < need.count) return { why: "gpuCount", free: usable.length };
  // Nothing declared (an openai-http profile with gpu_count only) asks for no memory: any usable GPU does.
  if (need.memoryBytes === 0)
    return {
      chosen: emptiestFirst(usable)
        .slice(0, need.count)
        .map(({ gpu }) => pick(gpu)),
    };
  const known = usable.filter((u): u is { gpu: GpuView; free: number } => u.free !== undefined);
  if (need.memoryBytes === undefined || known.length < need.count) return { why: "gpuUnknown" };
  const best = emptiestFirst(known).slice(0, need.count);
  const decisive = best.at(-1)!.free;
  if (decisive < need.memoryBytes) return { why: "gpuMemory", free: decisive };
  return { chosen: best.map(({ gpu }) => pick(gpu)) };
}

const pick = (gpu: GpuView) => ({ uuid: gpu.uuid, index: gpu.index });

function emptiestFirst<T extends { gpu: GpuView; free: number | undefined }>(xs: T[]): T[] {
  return [...xs].sort((a, b) => (b.free ?? -1) - (a.free ?? -1) || a.gpu.index - b.gpu.index);
}
