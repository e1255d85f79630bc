// GPU reconciliation: a node's GPUs are identified by (node id, GPU UUID). Everything else about a
// GPU (its index, PCI bus id, even its driver) is a mutable fact that may change between reports,
// for example when devices are re-enumerated after a reboot.
//
// Pure: the caller loads the node's known GPUs, calls `reconcileGpus`, and writes the result.

/** The facts a report states about one GPU, besides its identity. */
export interface GpuFacts {
  index: number;
  pciBusId: string;
  model: string;
  memoryTotalBytes: bigint;
  driverVersion: string;
  vendor: string;
}

export interface ReportedGpu extends GpuFacts {
  uuid: string;
}

/** Picks a GPU's identity and facts from any record that carries them (row, message). */
export function reportedGpu(g: ReportedGpu): ReportedGpu {
  return {
    uuid: g.uuid,
    index: g.index,
    pciBusId: g.pciBusId,
    model: g.model,
    memoryTotalBytes: g.memoryTotalBytes,
    driverVersion: g.driverVersion,
    vendor: g.vendor,
  };
}

export interface KnownGpu extends ReportedGpu {
  state: "present" | "missing";
  /** When it was first found missing; null while present. */
  missingSince: number | null;
}

export interface GpuUpsert {
  uuid: string;
  facts: GpuFacts;
  state: "present";
  missingSince: null;
  /** Not known before. */
  added: boolean;
  /** Known but missing until this report. */
  returned: boolean;
  /** Known, and some fact differs from the stored one (always false when added). */
  factsChanged: boolean;
}

export type GpuEventAction = "gpu.added" | "gpu.missing" | "gpu.returned";

export interface GpuEvent {
  action: GpuEventAction;
  uuid: string;
}

export interface GpuReconciliation {
  /** Every reported GPU, in report order, to be stored as present with these facts. */
  upserts: GpuUpsert[];
  /** UUIDs of known GPUs to mark missing, in the order they were known. */
  markMissing: string[];
  /** The `missingSince` to store for `markMissing` (the `now` given). */
  missingSince: number;
  /** Audit events: added/returned in report order, then missing. */
  events: GpuEvent[];
}

/** A report the caller must refuse as a whole (invalid_argument); nothing is applied. */
export class InventoryError extends Error {
  override readonly name = "InventoryError";
  constructor(
    readonly reason: "empty_uuid" | "duplicate_uuid",
    message: string,
    readonly uuid?: string,
  ) {
    super(message);
  }
}

function factsOf(gpu: ReportedGpu): GpuFacts {
  const { index, pciBusId, model, memoryTotalBytes, driverVersion, vendor } = gpu;
  return { index, pciBusId, model, memoryTotalBytes, driverVersion, vendor };
}

function sameFacts(a: GpuFacts, b: GpuFacts): boolean {
  return (
    a.index === b.index &&
    a.pciBusId === b.pciBusId &&
    a.model === b.model &&
    a.memoryTotalBytes === b.memoryTotalBytes &&
    a.driverVersion === b.driverVersion &&
    a.vendor === b.vendor
  );
}

/**
 * Reconcile one inventory report against the node's known GPUs.
 *
 * `complete` says the collection succeeded and listed every GPU. Only then may an absent GPU be
 * marked missing; a failed or partial collection (complete false) leaves absent GPUs exactly as
 * they are, so a flaky NVML call does not make a healthy GPU vanish. Reported GPUs are applied
 * either way: what was seen is true even if the list is incomplete.
 *
 * UUIDs are compared exactly as given (normalising them is the collector's job). Throws
 * InventoryError, before producing anything, for an empty or duplicated UUID.
 */
export function reconcileGpus(
  known: readonly KnownGpu[],
  reported: readonly ReportedGpu[],
  complete: boolean,
  now: number,
): GpuReconciliation {
  const seen = new Set<string>();
  for (const gpu of reported) {
    if (gpu.uuid.trim() === "") {
      throw new InventoryError("empty_uuid", "a reported GPU has an empty UUID");
    }
    if (seen.has(gpu.uuid)) {
      throw new InventoryError("duplicate_uuid", `GPU UUID ${gpu.uuid} is reported more than once`, gpu.uuid);
    }
    seen.add(gpu.uuid);
  }

  const byUuid = new Map(known.map((gpu) => [gpu.uuid, gpu]));
  const upserts: GpuUpsert[] = [];
  const events: GpuEvent[] = [];

  for (const gpu of reported) {
    const before = byUuid.get(gpu.uuid);
    const facts = factsOf(gpu);
    const added = before === undefined;
    const returned = before?.state === "missing";
    const factsChanged = before !== undefined && !sameFacts(factsOf(before), facts);
    upserts.push({ uuid: gpu.uuid, facts, state: "present", missingSince: null, added, returned, factsChanged });
    if (added) events.push({ action: "gpu.added", uuid: gpu.uuid });
    if (returned) events.push({ action: "gpu.returned", uuid: gpu.uuid });
  }

  const markMissing = complete ? known.filter((gpu) => gpu.state === "present" && !seen.has(gpu.uuid)).map((gpu) => gpu.uuid) : [];
  for (const uuid of markMissing) events.push({ action: "gpu.missing", uuid });

  return { upserts, markMissing, missingSince: now, events };
}
