// The load one control plane reports for the autoscaler: requests in flight sampled and averaged
// over the window; a steady load is reported every time, an idle deployment once, then forgotten.
import { describe, expect, it } from "vitest";
import { ServingActivity } from "../../server/invoke/activity.js";

describe("ServingActivity", () => {
  it("averages the samples of the window, held requests included", () => {
    const a = new ServingActivity(4);
    const ends = [a.began("d", 100), a.began("d", 200)];
    a.holding("d", 1);
    a.sample();
    a.sample();
    ends[0]!();
    a.sample();
    a.sample();
    expect(a.report()).toEqual([{ deploymentId: "d", load: 1.5, held: 1, lastRequestAt: 200 }]);
    // Past the window the oldest samples drop out.
    a.sample();
    a.sample();
    expect(a.report()).toEqual([{ deploymentId: "d", load: 1, held: 1, lastRequestAt: 200 }]);
  });

  it("reports a steady load every time, an idle deployment once at zero, then forgets it", () => {
    const a = new ServingActivity(2);
    const end = a.began("d", 5);
    a.sample();
    a.sample();
    expect(a.report()).toHaveLength(1);
    expect(a.report()).toHaveLength(1);
    end();
    end();
    a.sample();
    a.sample();
    expect(a.report()).toEqual([{ deploymentId: "d", load: 0, held: 0, lastRequestAt: 5 }]);
    expect(a.report()).toEqual([]);
    // Forgotten: a new request starts it afresh.
    a.began("d", 9);
    a.sample();
    expect(a.report()).toEqual([{ deploymentId: "d", load: 1, held: 0, lastRequestAt: 9 }]);
  });

  it.each([
    ["a request in flight, however long ago it began", (a: ServingActivity) => void a.began("d", 0), true],
    ["a request held for a cold start", (a: ServingActivity) => a.holding("d", 1), true],
    [
      "a request that ended at or after `since`",
      (a: ServingActivity) => {
        a.began("d", 1_000)();
      },
      true,
    ],
    [
      "a request that ended before `since`",
      (a: ServingActivity) => {
        a.began("d", 999)();
      },
      false,
    ],
    ["another deployment's request", (a: ServingActivity) => void a.began("e", 2_000), false],
    ["no request at all", (_a: ServingActivity) => undefined, false],
  ])("says whether it served the deployment since a time, ahead of its reports: %s", (_what, act, served) => {
    const a = new ServingActivity(2);
    act(a);
    expect(a.servedSince("d", 1_000)).toBe(served);
  });
});
