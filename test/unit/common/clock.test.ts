import { describe, expect, it } from "vitest";
import { ManualClock, offsetClock } from "../../../common/clock.js";

describe("ManualClock.after", () => {
  it("calls back once its time has passed, not before", () => {
    const clock = new ManualClock(0);
    const fired: number[] = [];
    clock.after(100, () => fired.push(clock.now()));
    clock.advance(99);
    expect(fired).toEqual([]);
    clock.advance(1);
    clock.advance(500);
    expect(fired).toEqual([100]);
    expect(clock.sleeping).toBe(0);
  });

  it("never calls back once cancelled, even by a timer woken in the same advance", () => {
    const clock = new ManualClock(0);
    const fired: string[] = [];
    let cancelLater: () => unknown = () => undefined;
    clock.after(10, () => {
      fired.push("first");
      cancelLater();
    });
    cancelLater = clock.after(20, () => fired.push("second"));
    const cancelled = clock.after(5, () => fired.push("cancelled"));
    cancelled();
    clock.advance(30);
    expect(fired).toEqual(["first"]);
  });

  it("is what sleep waits on: an abort ends the sleep and removes its timer", async () => {
    const clock = new ManualClock(0);
    const stop = new AbortController();
    const slept = clock.sleep(1_000, stop.signal);
    expect(clock.sleeping).toBe(1);
    stop.abort();
    await slept;
    expect(clock.sleeping).toBe(0);
  });

  it("an offset clock shares its base's timers", () => {
    const base = new ManualClock(0);
    const skewed = offsetClock(base, 5_000);
    let fired = false;
    skewed.after(10, () => (fired = true));
    base.advance(10);
    expect(fired).toBe(true);
    expect(skewed.now()).toBe(5_010);
  });
});
