import { describe, expect, it } from "vitest";
import {
  computeLiveness,
  livenessTransition,
  nextLivenessDeadline,
  reclaimDue,
  type Liveness,
  type LivenessTransition,
} from "../../../server/liveness/rules.js";

const T = { staleAfterMs: 30_000, offlineAfterMs: 90_000 };
const NOW = 1_800_000_000_000;
const S = 1000;

describe("computeLiveness", () => {
  it.each<[string, number | null, boolean, boolean, Liveness]>([
    ["never heard from", null, false, false, "pending"],
    ["just now", NOW, false, false, "online"],
    ["10 s ago", NOW - 10 * S, false, false, "online"],
    ["exactly at the stale threshold", NOW - 30 * S, false, false, "online"],
    ["1 ms past the stale threshold", NOW - 30 * S - 1, false, false, "stale"],
    ["exactly at the offline threshold", NOW - 90 * S, false, false, "stale"],
    ["1 ms past the offline threshold", NOW - 90 * S - 1, false, false, "offline"],
    ["an hour ago", NOW - 3600 * S, false, false, "offline"],
    ["stamped in the future by another replica", NOW + 2 * S, false, false, "online"],
    ["disabled overrides online", NOW, true, false, "disabled"],
    ["disabled overrides offline", NOW - 3600 * S, true, false, "disabled"],
    ["disabled overrides pending", null, true, false, "disabled"],
    ["decommissioned overrides online", NOW, false, true, "decommissioned"],
    ["decommissioned overrides disabled", NOW, true, true, "decommissioned"],
    ["decommissioned overrides pending", null, true, true, "decommissioned"],
  ])("%s", (_name, lastHeartbeatAt, disabled, decommissioned, expected) => {
    expect(computeLiveness({ lastHeartbeatAt, disabled, decommissioned }, NOW, T)).toBe(expected);
  });

  it("rejects thresholds in the wrong order", () => {
    const input = { lastHeartbeatAt: NOW, disabled: false, decommissioned: false };
    expect(() => computeLiveness(input, NOW, { staleAfterMs: 90_000, offlineAfterMs: 30_000 })).toThrow(RangeError);
  });
});

describe("livenessTransition", () => {
  const none: LivenessTransition = { changed: false, audit: false };
  it.each<[Liveness, Liveness, LivenessTransition]>([
    ["online", "online", none],
    ["stale", "stale", none],
    ["offline", "offline", none],
    ["pending", "pending", none],
    ["online", "stale", { changed: true, audit: true, action: "node.stale" }],
    ["stale", "offline", { changed: true, audit: true, action: "node.offline" }],
    ["online", "offline", { changed: true, audit: true, action: "node.offline" }],
    ["stale", "online", { changed: true, audit: true, action: "node.online" }],
    ["offline", "online", { changed: true, audit: true, action: "node.online" }],
    ["pending", "online", { changed: true, audit: true, action: "node.online" }],
    ["pending", "stale", { changed: true, audit: true, action: "node.stale" }],
    ["pending", "offline", { changed: true, audit: true, action: "node.offline" }],
    ["online", "pending", { changed: true, audit: false }],
    // Operator-owned states: recorded by the operator action, never by the reconciler.
    ["disabled", "online", none],
    ["disabled", "offline", none],
    ["disabled", "decommissioned", none],
    ["decommissioned", "online", none],
    ["decommissioned", "disabled", none],
    ["online", "disabled", none],
    ["offline", "decommissioned", none],
    ["pending", "disabled", none],
  ])("%s -> %s", (previous, next, expected) => {
    expect(livenessTransition(previous, next)).toEqual(expected);
  });
});

describe("nextLivenessDeadline", () => {
  it.each<[string, number | null, number | null]>([
    ["never heard from: never", null, null],
    ["just now: turns stale 30 s + 1 ms later", NOW, NOW + 30 * S + 1],
    ["10 s ago: turns stale in 20 s + 1 ms", NOW - 10 * S, NOW + 20 * S + 1],
    ["exactly at the stale threshold: turns stale next ms", NOW - 30 * S, NOW + 1],
    ["stale: turns offline 90 s + 1 ms after the heartbeat", NOW - 40 * S, NOW + 50 * S + 1],
    ["exactly at the offline threshold: turns offline next ms", NOW - 90 * S, NOW + 1],
    ["offline: never", NOW - 90 * S - 1, null],
    ["in the future: counted from the heartbeat", NOW + 5 * S, NOW + 35 * S + 1],
  ])("%s", (_name, lastHeartbeatAt, expected) => {
    expect(nextLivenessDeadline(lastHeartbeatAt, NOW, T)).toBe(expected);
  });

  it("the deadline is the first instant computeLiveness changes", () => {
    const input = { lastHeartbeatAt: NOW - 10 * S, disabled: false, decommissioned: false };
    const first = nextLivenessDeadline(input.lastHeartbeatAt, NOW, T)!;
    expect(computeLiveness(input, first - 1, T)).toBe("online");
    expect(computeLiveness(input, first, T)).toBe("stale");
    const second = nextLivenessDeadline(input.lastHeartbeatAt, first, T)!;
    expect(computeLiveness(input, second - 1, T)).toBe("stale");
    expect(computeLiveness(input, second, T)).toBe("offline");
    expect(nextLivenessDeadline(input.lastHeartbeatAt, second, T)).toBeNull();
  });
});

describe("reclaimDue", () => {
  const GRACE = 60 * S;
  it.each<[string, number | null, boolean]>([
    ["never heard from (nothing to measure from; no work handed out)", null, false],
    ["online", NOW - 10 * S, false],
    ["offline but within the grace period", NOW - 120 * S, false],
    ["exactly offline threshold + grace", NOW - 150 * S, false],
    ["1 ms beyond offline threshold + grace", NOW - 150 * S - 1, true],
    ["unreachable for an hour", NOW - 3600 * S, true],
    ["stamped in the future", NOW + 5 * S, false],
  ])("%s", (_name, lastHeartbeatAt, expected) => {
    expect(reclaimDue(lastHeartbeatAt, NOW, T.offlineAfterMs, GRACE)).toBe(expected);
  });
});
