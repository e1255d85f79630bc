// The autoscaler's rule as a table with a fake `now`: settings, wanted replicas, the measured load
// and the change already waiting in; the replicas it wants now (or none) and what still waits, out.
import { describe, expect, it } from "vitest";
import {
  checkAutoscaling,
  decideScale,
  type AutoscalePolicy,
  type AutoscaleRequest,
  type PendingScale,
  type ScaleSignal,
} from "../../../server/deployments/autoscale-rules.js";

const policy: AutoscalePolicy = {
  minReplicas: 1,
  maxReplicas: 4,
  targetInFlight: 4,
  upscaleDelayMs: 30_000,
  downscaleDelayMs: 600_000,
  scaleToZeroAfterMs: 900_000,
};
const toZero = { ...policy, minReplicas: 0 };
const now = 10_000_000;
/** null: no request is known. */
const signal = (load: number, held = 0, lastRequestAgoMs: number | null = 0): ScaleSignal => ({
  load,
  held,
  lastRequestAt: lastRequestAgoMs === null ? undefined : now - lastRequestAgoMs,
});
const waiting = (replicas: number, agoMs: number): PendingScale => ({ replicas, since: now - agoMs });

describe("decideScale", () => {
  it.each<[string, AutoscalePolicy, number, ScaleSignal, PendingScale | undefined, number | undefined, PendingScale | undefined]>([
    ["at the target: nothing to do", policy, 2, signal(8), undefined, undefined, undefined],
    ["above the target: the delay starts", policy, 2, signal(11.4), undefined, undefined, waiting(3, 0)],
    ["above the target, delay not yet over", policy, 2, signal(11.4), waiting(3, 29_999), undefined, waiting(3, 29_999)],
    ["above the target past the delay: up by the load", policy, 2, signal(11.4), waiting(3, 30_000), 3, undefined],
    ["the latest load decides the count", policy, 1, signal(16), waiting(2, 31_000), 4, undefined],
    ["never above max", policy, 2, signal(100), waiting(3, 40_000), 4, undefined],
    ["back at the target: the wait is dropped", policy, 2, signal(7), waiting(3, 20_000), undefined, undefined],
    ["below the target: the downscale delay starts", policy, 3, signal(4), undefined, undefined, waiting(1, 0)],
    ["a change of direction starts afresh", policy, 3, signal(4), waiting(4, 500_000), undefined, waiting(1, 0)],
    ["below the target past the downscale delay", policy, 3, signal(4), waiting(2, 600_000), 1, undefined],
    ["never below min", policy, 3, signal(0), waiting(1, 600_000), 1, undefined],
    ["min 0, idle but not for long: one stays", toZero, 2, signal(0, 0, 60_000), waiting(1, 600_000), 1, undefined],
    ["min 0, idle past scale-to-zero: zero at once", toZero, 1, signal(0, 0, 900_000), undefined, 0, undefined],
    ["min 0, in flight though the last arrival is old: one stays", toZero, 1, signal(0.2, 0, 950_000), undefined, undefined, undefined],
    ["at zero, a request held: one at once", toZero, 0, signal(0, 1, 950_000), undefined, 1, undefined],
    ["at zero, a burst held: as many as the load asks, at once", toZero, 0, signal(9, 9), undefined, 3, undefined],
    ["at zero, nothing called: stays at zero", toZero, 0, signal(0, 0, null), undefined, undefined, undefined],
    ["below min after the settings changed: at once", { ...policy, minReplicas: 2 }, 1, signal(0), undefined, 2, undefined],
    ["above max after the settings changed: at once", policy, 6, signal(30), undefined, 4, undefined],
    ["no delay: at once", { ...policy, upscaleDelayMs: 0 }, 1, signal(5), undefined, 2, undefined],
  ])("%s", (_, p, current, s, pending, replicas, stillPending) => {
    const out = decideScale({ policy: p, current, signal: s, pending, now, watchedSince: now - 1_000_000, windowMs: 30_000 });
    expect(out.replicas).toBe(replicas);
    expect(out.pending).toEqual(stillPending);
    if (replicas !== undefined) expect(out.reason).toBeTruthy();
  });

  it("counts idleness from when it began watching when no request is known", () => {
    const at = (watchedAgoMs: number) =>
      decideScale({
        policy: toZero,
        current: 1,
        signal: signal(0, 0, null),
        pending: undefined,
        now,
        watchedSince: now - watchedAgoMs,
        windowMs: 30_000,
      });
    expect(at(60_000).replicas).toBeUndefined();
    expect(at(900_000).replicas).toBe(0);
  });

  it("says what made the decision, with the numbers", () => {
    const up = decideScale({
      policy,
      current: 2,
      signal: signal(22.8),
      pending: waiting(3, 30_000),
      now,
      watchedSince: 0,
      windowMs: 30_000,
    });
    expect(up.reason).toBe("11.4 in flight per replica over 30 s, target 4");
    const cold = decideScale({
      policy: toZero,
      current: 0,
      signal: signal(0, 2),
      pending: undefined,
      now,
      watchedSince: 0,
      windowMs: 30_000,
    });
    expect(cold.reason).toBe("cold start: 2 requests held");
    const idle = decideScale({
      policy: toZero,
      current: 1,
      signal: signal(0, 0, 960_000),
      pending: undefined,
      now,
      watchedSince: 0,
      windowMs: 30_000,
    });
    expect(idle.reason).toBe("no request for 16 min (scale to zero after 15 min)");
  });
});

describe("checkAutoscaling", () => {
  const base: AutoscaleRequest = {
    minReplicas: 0,
    maxReplicas: 2,
    targetInFlight: 0,
    upscaleDelayMs: undefined,
    downscaleDelayMs: undefined,
    scaleToZeroAfterMs: undefined,
    coldStartTimeoutMs: undefined,
    priority: 0,
  };
  it("fills the stated defaults; target 0 is max_in_flight", () => {
    expect(checkAutoscaling(base, 8)).toEqual({
      minReplicas: 0,
      maxReplicas: 2,
      targetInFlight: 8,
      upscaleDelayMs: 30_000,
      downscaleDelayMs: 600_000,
      scaleToZeroAfterMs: 900_000,
      coldStartTimeoutMs: 120_000,
      priority: 0,
    });
  });
  it.each<[string, Partial<AutoscaleRequest>, string]>([
    ["max 0", { maxReplicas: 0 }, "autoscaling.max_replicas: from 1 to 64"],
    ["max over 64", { maxReplicas: 65 }, "autoscaling.max_replicas: from 1 to 64"],
    ["min over max", { minReplicas: 3 }, "autoscaling.max_replicas: at least min_replicas (3)"],
    ["target over 1024", { targetInFlight: 1025 }, "autoscaling.target_in_flight: from 1 to 1024 (0 for max_in_flight)"],
    ["upscale delay over an hour", { upscaleDelayMs: 3_600_001 }, "autoscaling.upscale_delay: at most 1 hour"],
    ["scale to zero after 0.5 s", { scaleToZeroAfterMs: 500 }, "autoscaling.scale_to_zero_after: from 1 s to 30 days"],
    ["priority past 1000", { priority: 1001 }, "autoscaling.priority: from -1000 to 1000"],
    ["cold start timeout over an hour", { coldStartTimeoutMs: 3_600_001 }, "autoscaling.cold_start_timeout: at most 1 hour"],
  ])("refuses %s", (_, change, message) => {
    expect(() => checkAutoscaling({ ...base, ...change }, 8)).toThrow(message);
  });
});
