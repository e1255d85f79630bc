import { describe, expect, it } from "vitest";
import { InventoryError, reconcileGpus, type GpuEvent, type KnownGpu, type ReportedGpu } from "../../../server/nodes/gpus.js";

const NOW = 1_800_000_000_000;
const EARLIER = NOW - 3_600_000;
const GIB80 = 80n * 1024n ** 3n;

function gpu(uuid: string, index: number, pciBusId = `00000000:${17 + index}:00.0`): ReportedGpu {
  return { uuid, index, pciBusId, model: "NVIDIA H100 80GB HBM3", memoryTotalBytes: GIB80, driverVersion: "550.54.15", vendor: "NVIDIA" };
}
const present = (g: ReportedGpu): KnownGpu => ({ ...g, state: "present", missingSince: null });
const missing = (g: ReportedGpu): KnownGpu => ({ ...g, state: "missing", missingSince: EARLIER });

const A = gpu("GPU-aaaa", 0);
const B = gpu("GPU-bbbb", 1);
const C = gpu("GPU-cccc", 2);
const D = gpu("GPU-dddd", 3);

// Per-upsert flags, in report order, as `uuid:flags` where flags are a(dded) r(eturned) f(actsChanged).
function flags(result: ReturnType<typeof reconcileGpus>): string[] {
  return result.upserts.map((u) => `${u.uuid}:${u.added ? "a" : ""}${u.returned ? "r" : ""}${u.factsChanged ? "f" : ""}`);
}

describe("reconcileGpus", () => {
  it.each<[string, KnownGpu[], ReportedGpu[], boolean, string[], string[], GpuEvent[]]>([
    [
      "new node with 3 GPUs",
      [],
      [A, B, C],
      true,
      ["GPU-aaaa:a", "GPU-bbbb:a", "GPU-cccc:a"],
      [],
      [
        { action: "gpu.added", uuid: "GPU-aaaa" },
        { action: "gpu.added", uuid: "GPU-bbbb" },
        { action: "gpu.added", uuid: "GPU-cccc" },
      ],
    ],
    [
      "same report again: nothing changed, no events",
      [present(A), present(B), present(C)],
      [A, B, C],
      true,
      ["GPU-aaaa:", "GPU-bbbb:", "GPU-cccc:"],
      [],
      [],
    ],
    [
      "index swap between two GPUs: facts changed, no add/missing",
      [present(A), present(B), present(C)],
      [{ ...A, index: 1 }, { ...B, index: 0 }, C],
      true,
      ["GPU-aaaa:f", "GPU-bbbb:f", "GPU-cccc:"],
      [],
      [],
    ],
    [
      "PCI bus id and driver change",
      [present(A)],
      [{ ...A, pciBusId: "00000000:AA:00.0", driverVersion: "560.28.03" }],
      true,
      ["GPU-aaaa:f"],
      [],
      [],
    ],
    [
      "one GPU vanishes from a complete report: missing",
      [present(A), present(B), present(C)],
      [A, C],
      true,
      ["GPU-aaaa:", "GPU-cccc:"],
      ["GPU-bbbb"],
      [{ action: "gpu.missing", uuid: "GPU-bbbb" }],
    ],
    [
      "one GPU vanishes from an incomplete report: left as it is",
      [present(A), present(B), present(C)],
      [A, C],
      false,
      ["GPU-aaaa:", "GPU-cccc:"],
      [],
      [],
    ],
    ["an already missing GPU absent again: no second event", [present(A), missing(B)], [A], true, ["GPU-aaaa:"], [], []],
    [
      "it returns",
      [present(A), missing(B), present(C)],
      [A, B, C],
      true,
      ["GPU-aaaa:", "GPU-bbbb:r", "GPU-cccc:"],
      [],
      [{ action: "gpu.returned", uuid: "GPU-bbbb" }],
    ],
    [
      "it returns in an incomplete report, with a new index",
      [present(A), missing(B)],
      [{ ...B, index: 0 }],
      false,
      ["GPU-bbbb:rf"],
      [],
      [{ action: "gpu.returned", uuid: "GPU-bbbb" }],
    ],
    [
      "an incomplete report that still carries a new GPU adds it",
      [present(A), present(B), present(C)],
      [A, D],
      false,
      ["GPU-aaaa:", "GPU-dddd:a"],
      [],
      [{ action: "gpu.added", uuid: "GPU-dddd" }],
    ],
    [
      "a GPU replaced in a complete report: one added, one missing",
      [present(A), present(B)],
      [A, { ...D, index: 1, pciBusId: B.pciBusId }],
      true,
      ["GPU-aaaa:", "GPU-dddd:a"],
      ["GPU-bbbb"],
      [
        { action: "gpu.added", uuid: "GPU-dddd" },
        { action: "gpu.missing", uuid: "GPU-bbbb" },
      ],
    ],
    [
      "an empty complete report: every present GPU goes missing",
      [present(A), present(B)],
      [],
      true,
      [],
      ["GPU-aaaa", "GPU-bbbb"],
      [
        { action: "gpu.missing", uuid: "GPU-aaaa" },
        { action: "gpu.missing", uuid: "GPU-bbbb" },
      ],
    ],
    ["an empty incomplete report (collection failed): nothing changes", [present(A), missing(B)], [], false, [], [], []],
  ])("%s", (_name, known, reported, complete, expectedFlags, markMissing, events) => {
    const result = reconcileGpus(known, reported, complete, NOW);
    expect(flags(result)).toEqual(expectedFlags);
    expect(result.markMissing).toEqual(markMissing);
    expect(result.missingSince).toBe(NOW);
    expect(result.events).toEqual(events);
    for (const [i, upsert] of result.upserts.entries()) {
      const { uuid, ...facts } = reported[i]!;
      expect(upsert).toMatchObject({ uuid, facts, state: "present", missingSince: null });
    }
  });

  it.each<[string, ReportedGpu[], "duplicate_uuid" | "empty_uuid"]>([
    ["duplicate uuid", [A, B, { ...A, index: 2 }], "duplicate_uuid"],
    ["empty uuid", [A, { ...B, uuid: "" }], "empty_uuid"],
    ["blank uuid", [{ ...A, uuid: "   " }], "empty_uuid"],
  ])("refuses the whole report: %s", (_name, reported, reason) => {
    const attempt = () => reconcileGpus([present(A)], reported, true, NOW);
    expect(attempt).toThrow(InventoryError);
    expect(attempt).toThrow(expect.objectContaining({ name: "InventoryError", reason }));
  });
});
