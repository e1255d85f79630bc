// Eviction order as a table: priority first, then the least recently used weighted by load time.
import { describe, expect, it } from "vitest";
import { evictionOrder, evictionReason, noEvictionReason, type EvictionCandidate } from "../../../server/deployments/eviction-rules.js";

const c = (name: string, idleS: number, loadS: number | undefined, priority = 0): EvictionCandidate => ({
  deploymentId: `id-${name}`,
  name,
  nodeId: "n1",
  revision: 1n,
  replica: 0,
  priority,
  idleMs: idleS * 1000,
  loadMs: loadS === undefined ? undefined : loadS * 1000,
});

describe("evictionOrder", () => {
  it.each<[string, EvictionCandidate[], string[]]>([
    ["least recently used first, loads alike", [c("a", 60, 2), c("b", 600, 2), c("c", 120, 2)], ["b", "c", "a"]],
    ["a slow load is kept over a fast one idle as long", [c("slow", 600, 40), c("fast", 600, 2)], ["fast", "slow"]],
    ["a slow load idle far longer still goes first", [c("slow", 36_000, 40), c("fast", 600, 2)], ["slow", "fast"]],
    [
      "the lowest priority goes first, however recent",
      [c("vip", 6_000, 1, 10), c("low", 5, 1, -5), c("mid", 60, 1)],
      ["low", "mid", "vip"],
    ],
    ["an unmeasured load counts as 1 s", [c("unknown", 100, undefined), c("known", 100, 2)], ["unknown", "known"]],
    ["ties by name", [c("b", 10, 1), c("a", 10, 1)], ["a", "b"]],
  ])("%s", (_, candidates, order) => {
    expect(evictionOrder(candidates).map((x) => x.name)).toEqual(order);
  });
});

describe("eviction reasons", () => {
  it("says whom for, and the numbers that chose it", () => {
    expect(evictionReason(c("chat", 600, 3.25), "code")).toBe(
      "evicted from node n1 to make room for code: idle 10 min, loads in 3.3 s, priority 0",
    );
    expect(evictionReason(c("chat", 30, undefined, -1), "code")).toBe(
      "evicted from node n1 to make room for code: idle 30 s, its load time unmeasured, priority -1",
    );
  });
  it("says why eviction could not make room", () => {
    expect(noEvictionReason(0, 0)).toBeUndefined();
    expect(noEvictionReason(0, 3)).toBe(
      "none of 3 autoscaled replicas of this priority or lower can be evicted (busy, used in the last while, or at min_replicas)",
    );
    expect(noEvictionReason(2, 3)).toBe("evicting any of 2 idle replicas would not make room on a node that fits");
  });
});
