// Placement as tables: a fleet snapshot and a request in, a node or a reason with numbers out.
import { describe, expect, it } from "vitest";
import { mountOf, place, size, type NodeView, type PlacementRequest } from "../../../server/deployments/placement.js";

const GiB = 2 ** 30;
const caps = ["artifact.acquire.v1", "deployment.load.v1"];

const node = (id: string, over: Partial<NodeView> = {}): NodeView => ({
  id,
  online: true,
  disabled: false,
  decommissioned: false,
  labels: { pool: "a" },
  engines: ["llama.cpp"],
  capabilities: caps,
  telemetry: { memoryAvailableBytes: 16 * GiB, mounts: [{ mount: "/", freeBytes: 100 * GiB }] },
  placed: [],
  ...over,
});
const memory = (id: string, availableGiB: number, over: Partial<NodeView> = {}) =>
  node(id, { telemetry: { memoryAvailableBytes: availableGiB * GiB, mounts: [{ mount: "/", freeBytes: 100 * GiB }] }, ...over });
const disk = (id: string, freeGiB: number, mount = "/") =>
  node(id, { telemetry: { memoryAvailableBytes: 16 * GiB, mounts: [{ mount, freeBytes: freeGiB * GiB }] } });
const holding = (deploymentId: string, memoryGiB: number | undefined) => ({
  deploymentId,
  memoryBytes: memoryGiB === undefined ? undefined : memoryGiB * GiB,
});

const req: PlacementRequest = {
  deploymentId: "d1",
  selector: { pool: "a" },
  engine: "llama.cpp",
  capabilities: caps,
  targetRoot: "/models",
  diskBytes: 2 * GiB,
  memoryBytes: 6.2 * GiB,
};

describe("place", () => {
  it.each<[string, NodeView[], Partial<PlacementRequest>, string]>([
    ["the only node that fits", [memory("n1", 3), memory("n2", 8)], {}, "n2"],
    [
      "spreads replicas: fewest of this deployment first, even where more else runs",
      [node("n1", { placed: [holding("d1", 1)] }), node("n2", { placed: [holding("x", 1), holding("y", 1)] })],
      { maxPerNode: 2 },
      "n2",
    ],
    ["max_per_node 2: a second replica may share a node", [node("n1", { placed: [holding("d1", 1)] })], { maxPerNode: 2 }, "n1"],
    [
      "max_per_node 3: the node with fewer of its replicas, though both have room",
      [node("n1", { placed: [holding("d1", 1), holding("d1", 1)] }), node("n2", { placed: [holding("d1", 1)] })],
      { maxPerNode: 3 },
      "n2",
    ],
    [
      "max_per_node 2: a full node is passed over for one with room",
      [node("n1", { placed: [holding("d1", 1), holding("d1", 1)] }), node("n2", { placed: [holding("d1", 1), holding("x", 1)] })],
      { maxPerNode: 2 },
      "n2",
    ],
    [
      "a rollout's new revision may share a node with the old replica it replaces",
      [node("n1", { placed: [{ ...holding("d1", 1), revision: 1n }] })],
      { revision: 2n },
      "n1",
    ],
    ["then the least loaded", [node("n1", { placed: [holding("x", 1)] }), node("n2")], {}, "n2"],
    ["then the most memory left", [memory("n1", 10), memory("n2", 12)], {}, "n2"],
    ["ties broken by id", [node("n2"), node("n1"), node("n3")], {}, "n1"],
    [
      "estimates held by other deployments count against memory",
      [memory("n1", 12, { placed: [holding("x", 8)] }), memory("n2", 7)],
      {},
      "n2",
    ],
    ["a named node ignores the selector", [node("n1", { labels: {} })], { nodeId: "n1" }, "n1"],
    [
      "the target root's own mount is the one asked",
      [
        node("n1", {
          telemetry: {
            memoryAvailableBytes: 16 * GiB,
            mounts: [
              { mount: "/", freeBytes: 0 },
              { mount: "/models", freeBytes: 5 * GiB },
            ],
          },
        }),
      ],
      {},
      "n1",
    ],
    [
      "an openai-http need of zero fits any node with telemetry",
      [node("n1", { engines: ["openai-http"] })],
      { engine: "openai-http", memoryBytes: 0 },
      "n1",
    ],
  ])("%s", (_, nodes, over, expected) => {
    expect(place(nodes, { ...req, ...over })).toEqual({ nodeId: expected, gpus: [] });
  });

  it.each<[string, NodeView[], Partial<PlacementRequest>, string]>([
    [
      "names the numbers",
      [node("n1", { engines: [] }), memory("n2", 3.1), memory("n3", 3.4)],
      {},
      "3 online; 1 lacks engine llama.cpp; 2 have 3.1 GiB and 3.4 GiB of memory free, needs 6.2 GiB",
    ],
    [
      "offline, disabled, decommissioned, labels, capabilities",
      [
        node("n1", { online: false }),
        node("n2", { disabled: true }),
        node("n3", { decommissioned: true }),
        node("n4", { labels: {} }),
        node("n5", { capabilities: [] }),
      ],
      {},
      '2 online; 3 are offline, disabled or decommissioned; 1 lacks labels {"pool":"a"}; 1 lacks capabilities artifact.acquire.v1, deployment.load.v1',
    ],
    [
      "disk on the target root",
      [disk("n1", 1), disk("n2", 1.5, "/models")],
      {},
      "2 online; 2 have 1.0 GiB and 1.5 GiB free on /models, needs 2.0 GiB",
    ],
    ["no mount holds the root: nothing free", [disk("n1", 50, "/data")], {}, "1 online; 1 has 0 B free on /models, needs 2.0 GiB"],
    [
      "missing telemetry is unknown, and says so",
      [node("n1", { telemetry: undefined })],
      {},
      "1 online; 1 has sent no telemetry yet, so disk and memory are unknown",
    ],
    [
      "an unknown need fits nowhere",
      [node("n1")],
      { memoryBytes: undefined },
      "1 online; the model's memory need is unknown (no GGUF estimate), so it fits none of the 1 left",
    ],
    [
      "a deployment of unknown memory makes the node's free memory unknown",
      [node("n1", { placed: [holding("x", undefined)] })],
      {},
      "1 online; 1 holds deployments of unknown memory",
    ],
    [
      "overcommitted nodes show what is left, below zero",
      [memory("n1", 4, { placed: [holding("x", 5)] })],
      {},
      "1 online; 1 has -1.0 GiB of memory free, needs 6.2 GiB",
    ],
    [
      "a named node that does not fit",
      [node("n1"), memory("n2", 2)],
      { nodeId: "n2" },
      "node n2: has 2.0 GiB of memory free, needs 6.2 GiB",
    ],
    ["a named node that is offline", [node("n1", { online: false })], { nodeId: "n1" }, "node n1: is offline, disabled or decommissioned"],
    ["a named node that is not known", [node("n1")], { nodeId: "n9" }, "node n9 is not known"],
    ["an empty fleet", [], {}, "no nodes are known"],
    [
      "every node already holds a replica (max_per_node 1)",
      [node("n1", { placed: [holding("d1", 1)] }), node("n2", { placed: [holding("d1", 1)] }), node("n3", { online: false })],
      {},
      "2 online; 1 is offline, disabled or decommissioned; 2 hold 1 of its replicas already (max_per_node)",
    ],
    [
      "max_per_node 2: the one node holds two already",
      [node("n1", { placed: [holding("d1", 1), holding("d1", 1)] })],
      { maxPerNode: 2 },
      "1 online; 1 holds 2 of its replicas already (max_per_node)",
    ],
    [
      "max_per_node 2: the replica already there holds its memory, so a second does not fit",
      [memory("n1", 10, { placed: [holding("d1", 6.2)] })],
      { maxPerNode: 2 },
      "1 online; 1 has 3.8 GiB of memory free, needs 6.2 GiB",
    ],
  ])("pending: %s", (_, nodes, over, reason) => {
    expect(place(nodes, { ...req, ...over })).toEqual({ pending: reason });
  });

  it("gives the same node for the same snapshot in any order", () => {
    const nodes = [node("c"), node("a"), node("b")];
    expect(place(nodes, req)).toEqual(place([...nodes].reverse(), req));
  });
});

describe("mountOf and size", () => {
  it.each([
    ["/models", ["/", "/models"], "/models"],
    ["/models/x", ["/", "/models"], "/models"],
    ["/modelsx", ["/", "/models"], "/"],
    ["/srv", ["/data"], undefined],
  ])("%s on %j is %s", (path, mounts, expected) => {
    expect(
      mountOf(
        path,
        mounts.map((mount) => ({ mount, freeBytes: 1 })),
      )?.mount,
    ).toBe(expected);
  });

  it.each([
    [512, "512 B"],
    [1536, "1.5 KiB"],
    [300 * 2 ** 20, "300.0 MiB"],
    [6.2 * GiB, "6.2 GiB"],
    [-GiB, "-1.0 GiB"],
  ])("%d bytes is %s", (bytes, text) => expect(size(bytes)).toBe(text));
});
