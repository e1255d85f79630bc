// GPU assignment as tables: a node's GPUs (free memory by telemetry), the replicas holding them,
// and a replica's need in; the GPUs it gets, or why none, with the numbers, out.
import { describe, expect, it } from "vitest";
import { assignGpus, type GpuNeed, type GpuView, type PlacedGpus } from "../../../server/deployments/gpu-fit.js";
import { place, type NodeView, type PlacementRequest } from "../../../server/deployments/placement.js";
import { gpuLoss, labelLoss } from "../../../server/deployments/node-loss.js";

const GiB = 2 ** 30;
const gpu = (index: number, freeGiB: number | undefined): GpuView => ({
  uuid: `GPU-${index}`,
  index,
  freeBytes: freeGiB === undefined ? undefined : freeGiB * GiB,
});
const held = (indices: number[], memoryGiB: number | undefined, shared = false): { gpus: PlacedGpus } => ({
  gpus: { uuids: indices.map((i) => `GPU-${i}`), memoryBytes: memoryGiB === undefined ? undefined : memoryGiB * GiB, shared },
});
const need = (count: number, memoryGiB: number | undefined, shared = false): GpuNeed => ({
  count,
  memoryBytes: memoryGiB === undefined ? undefined : memoryGiB * GiB,
  shared,
});
const indices = (fit: ReturnType<typeof assignGpus>) => ("chosen" in fit ? fit.chosen.map((g) => g.index) : fit);

describe("assignGpus", () => {
  it.each<[string, GpuView[], { gpus?: PlacedGpus }[], GpuNeed, ReturnType<typeof indices>]>([
    ["the emptiest GPU", [gpu(0, 10), gpu(1, 20)], [], need(1, 8), [1]],
    ["index breaks ties", [gpu(1, 20), gpu(0, 20)], [], need(1, 8), [0]],
    ["two GPUs, the two emptiest", [gpu(0, 10), gpu(1, 30), gpu(2, 20)], [], need(2, 8), [1, 2]],
    ["a GPU another replica holds is not given again", [gpu(0, 40), gpu(1, 10)], [held([0], 1)], need(1, 8), [1]],
    ["two replicas on a 2-GPU node get different GPUs", [gpu(0, 40), gpu(1, 40)], [held([1], 8)], need(1, 8), [0]],
    ["sharing: both allow it, the held memory counts", [gpu(0, 20), gpu(1, 10)], [held([0], 15, true)], need(1, 4, true), [1]],
    ["sharing: a held GPU with room left is given", [gpu(0, 20)], [held([0], 8, true)], need(1, 8, true), [0]],
    ["sharing: the holder does not allow it", [gpu(0, 20)], [held([0], 1, false)], need(1, 1, true), { why: "gpuCount", free: 0 }],
    ["sharing: this replica does not allow it", [gpu(0, 20)], [held([0], 1, true)], need(1, 1, false), { why: "gpuCount", free: 0 }],
    ["too few GPUs", [gpu(0, 80)], [], need(2, 1), { why: "gpuCount", free: 1 }],
    ["a CPU node", [], [], need(1, 1), { why: "gpuCount", free: 0 }],
    [
      "too little memory: the count-th emptiest decides",
      [gpu(0, 10), gpu(1, 30), gpu(2, 6)],
      [],
      need(2, 12),
      { why: "gpuMemory", free: 10 * GiB },
    ],
    [
      "held memory comes off the telemetry's free",
      [gpu(0, 20)],
      [held([0], 15, true)],
      need(1, 8, true),
      { why: "gpuMemory", free: 5 * GiB },
    ],
    ["no telemetry for a GPU: unknown", [gpu(0, undefined)], [], need(1, 1), { why: "gpuUnknown" }],
    ["a holder of unknown need: unknown", [gpu(0, 20)], [held([0], undefined, true)], need(1, 1, true), { why: "gpuUnknown" }],
    ["an unknown need fits nowhere", [gpu(0, 20)], [], need(1, undefined), { why: "gpuUnknown" }],
    ["nothing declared: any usable GPU, even of unknown memory", [gpu(0, undefined), gpu(1, 5)], [], need(1, 0), [1]],
  ])("%s", (_, gpus, placed, n, expected) => {
    expect(indices(assignGpus(gpus, placed, n))).toEqual(expected);
  });

  it("answers UUIDs with their indices", () => {
    expect(assignGpus([gpu(3, 10)], [], need(1, 1))).toEqual({ chosen: [{ uuid: "GPU-3", index: 3 }] });
  });
});

const caps = ["deployment.load.v1"];
const node = (id: string, gpus: GpuView[], placed: NodeView["placed"] = []): NodeView => ({
  id,
  online: true,
  disabled: false,
  decommissioned: false,
  labels: {},
  engines: ["openai-http"],
  capabilities: caps,
  telemetry: { memoryAvailableBytes: 64 * GiB, mounts: [{ mount: "/", freeBytes: 100 * GiB }] },
  placed,
  gpus,
});
const req: PlacementRequest = {
  deploymentId: "d1",
  selector: {},
  engine: "openai-http",
  capabilities: caps,
  targetRoot: "/models",
  diskBytes: GiB,
  memoryBytes: 0,
  maxPerNode: 4,
  gpu: need(1, 16),
};

describe("place with GPUs", () => {
  it("picks the node and its GPUs together: a node whose GPUs fit, though another has more RAM free", () => {
    const small = node("n1", [gpu(0, 8), gpu(1, 8)]);
    const big = node("n2", [gpu(0, 10), gpu(1, 24)]);
    expect(place([small, big], req)).toEqual({ nodeId: "n2", gpus: [{ uuid: "GPU-1", index: 1 }] });
  });

  it("a second replica on the same node gets the other GPU", () => {
    const n = node("n1", [gpu(0, 40), gpu(1, 40)], [{ deploymentId: "d1", memoryBytes: 0, gpus: held([0], 16).gpus }]);
    expect(place([n], req)).toEqual({ nodeId: "n1", gpus: [{ uuid: "GPU-1", index: 1 }] });
  });

  it.each<[string, NodeView[], Partial<PlacementRequest>, string]>([
    [
      "too large for either GPU's free memory: not placed, with the numbers",
      [node("n1", [gpu(0, 10), gpu(1, 12)])],
      {},
      "1 online; 1 has 12.0 GiB of GPU memory free on the emptiest GPU, needs 16.0 GiB",
    ],
    [
      "several GPUs: the count-th emptiest is the number",
      [node("n1", [gpu(0, 20), gpu(1, 12)]), node("n2", [gpu(0, 40), gpu(1, 8)])],
      { gpu: need(2, 16) },
      "2 online; 2 have 8.0 GiB and 12.0 GiB of GPU memory free on each of the 2 emptiest GPUs, needs 16.0 GiB on each",
    ],
    [
      "GPUs held by other replicas, and a CPU node",
      [node("n1", [gpu(0, 80)], [{ deploymentId: "x", memoryBytes: 0, gpus: held([0], 1).gpus }]), node("n2", [])],
      {},
      "2 online; 2 have 0 and 0 GPUs it may use (present and not held by another replica), needs 1",
    ],
    [
      "no GPU telemetry",
      [node("n1", [gpu(0, undefined)])],
      {},
      "1 online; 1 has GPUs of unknown free memory (no GPU telemetry, or replicas of unknown need)",
    ],
    [
      "a named node",
      [node("n1", [gpu(0, 4)])],
      { nodeId: "n1" },
      "node n1: has 4.0 GiB of GPU memory free on the emptiest GPU, needs 16.0 GiB",
    ],
  ])("pending: %s", (_, nodes, over, reason) => {
    expect(place(nodes, { ...req, ...over })).toEqual({ pending: reason });
  });
});

describe("gpuLoss", () => {
  it.each<[string[], string[], string | undefined]>([
    [[], ["GPU-0"], undefined],
    [["GPU-1"], ["GPU-0"], undefined],
    [["GPU-0"], ["GPU-0"], "GPU GPU-0 of node n1 is missing"],
    [["GPU-0", "GPU-1", "GPU-2"], ["GPU-2", "GPU-0"], "GPUs GPU-0, GPU-2 of node n1 are missing"],
  ])("assigned %j, missing %j: %s", (assigned, missing, reason) => {
    expect(gpuLoss("n1", assigned, new Set(missing))).toBe(reason);
  });
});

describe("labelLoss", () => {
  it.each<[string, Record<string, unknown>, Record<string, string>, boolean, string | undefined]>([
    ["labels still carry the selector", { zone: "a", gpu: "h100" }, { zone: "a" }, false, undefined],
    ["no selector: any node", {}, {}, false, undefined],
    ["a label changed", { zone: "b" }, { zone: "a" }, false, "node n1 no longer has the labels zone=a"],
    ["labels removed", {}, { zone: "a", pool: "x" }, false, "node n1 no longer has the labels zone=a, pool=x"],
    ["pinned to its node: stays", { zone: "b" }, { zone: "a" }, true, undefined],
  ])("%s", (_, labels, selector, pinned, reason) => {
    expect(labelLoss("n1", labels, selector, pinned)).toBe(reason);
  });
});
