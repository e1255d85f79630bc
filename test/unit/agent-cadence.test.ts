// The agent's periodic work (agent/session/cadence.ts) on a manual clock: runs stay on their own grid when
// the event loop is late, so agents sharing a loop do not fall into step as under setInterval.
import { describe, expect, it } from "vitest";
import { type CadenceTimers, repeat } from "../../agent/session/cadence.js";

/** Timers on a clock the test moves; `advance` fires what falls due, in order, each at its time or when the loop gets to it. */
function manualTimers() {
  let now = 0;
  let next = 0;
  const pending = new Map<number, { at: number; run: () => void }>();
  const timers: CadenceTimers = {
    now: () => now,
    setTimeout: (run, ms) => {
      pending.set(++next, { at: now + ms, run });
      return next;
    },
    clearTimeout: (handle) => pending.delete(handle as number),
  };
  /** Moves the clock to `to`; a timer due before `busyUntil` fires only then (a stalled loop). */
  const advance = (to: number, busyUntil = 0) => {
    for (;;) {
      const due = [...pending.entries()].filter(([, t]) => t.at <= to).sort((a, b) => a[1].at - b[1].at)[0];
      if (due === undefined) break;
      pending.delete(due[0]);
      now = Math.max(due[1].at, busyUntil, now);
      due[1].run();
    }
    now = to;
  };
  return { timers, advance, pending };
}

describe("agent cadence", () => {
  it("runs once per interval on average, each run within its jitter", () => {
    const { timers, advance } = manualTimers();
    const runs: number[] = [];
    let r = 0;
    const random = () => [0, 1, 0.5, 0.25][r++ % 4]!;
    repeat(1000, () => runs.push(timers.now()), { timers, random });
    advance(10_100);
    expect(runs).toEqual([950, 2000, 3000, 3975, 4925, 5975, 6975, 7950, 8900, 9950]);
  });

  it("keeps two cadences apart after the loop held both past their time", () => {
    const { timers, advance } = manualTimers();
    const runs: [string, number][] = [];
    repeat(1000, () => runs.push(["a", timers.now()]), { timers, jitter: 0 });
    advance(50);
    repeat(1000, () => runs.push(["b", timers.now()]), { timers, jitter: 0 });
    // The loop is busy until 1,300: both run then, together.
    advance(1400, 1300);
    advance(3100);
    // Under setInterval both would now run at 2,300 and 3,300, in step for good.
    expect(runs).toEqual([
      ["a", 1300],
      ["b", 1300],
      ["a", 2000],
      ["b", 2050],
      ["a", 3000],
      ["b", 3050],
    ]);
  });

  it("runs once, not a burst, after a stall longer than several intervals", () => {
    const { timers, advance } = manualTimers();
    const runs: number[] = [];
    repeat(1000, () => runs.push(timers.now()), { timers, jitter: 0, random: () => 0.5 });
    advance(5000, 4500);
    expect(runs).toEqual([4500]);
    advance(6600);
    expect(runs).toEqual([4500, 5500, 6500]);
  });

  it("spreads the cadences one stall held together over the next interval", () => {
    const { timers, advance } = manualTimers();
    // A fixed pseudo-random sequence (Park-Miller), so the test is the same on every run.
    let seed = 42;
    const random = () => {
      seed = (seed * 16_807) % 2_147_483_647;
      return seed / 2_147_483_647;
    };
    const runs = Array.from({ length: 200 }, () => [] as number[]);
    for (const r of runs) repeat(1000, () => r.push(timers.now()), { timers, random });
    // 200 agents sharing one event loop, held past every one's time: each runs once, at 4,500.
    advance(5000, 4500);
    expect(runs.every((r) => r.length === 1 && r[0] === 4500)).toBe(true);
    advance(6600);
    // One interval from now, give or take 5 %, would leave all 200 within 100 ms of each other.
    const next = runs.map((r) => r[1]!);
    expect(Math.min(...next)).toBeGreaterThanOrEqual(5000);
    expect(Math.max(...next)).toBeLessThanOrEqual(6000);
    const perTenth = new Array<number>(10).fill(0);
    for (const t of next) perTenth[Math.min(9, Math.floor((t - 5000) / 100))]!++;
    expect(Math.max(...perTenth)).toBeLessThan(40); // 20 each, evenly spread
    expect(Math.min(...perTenth)).toBeGreaterThan(5);
  });

  it("stops: no run after the returned function is called, and no timer left armed", () => {
    const { timers, advance, pending } = manualTimers();
    const runs: number[] = [];
    const stop = repeat(1000, () => runs.push(timers.now()), { timers, jitter: 0 });
    advance(1500);
    stop();
    expect(pending.size).toBe(0);
    advance(5000);
    expect(runs).toEqual([1000]);
  });

  it("skips runs while the last is unfinished when told not to overlap, and overlaps by default", async () => {
    for (const overlap of [false, true]) {
      const { timers, advance } = manualTimers();
      let started = 0;
      let finish = () => {};
      repeat(
        1000,
        () => {
          started++;
          return new Promise<void>((resolve) => {
            finish = resolve;
          });
        },
        { timers, jitter: 0, overlap },
      );
      advance(3500);
      expect(started).toBe(overlap ? 3 : 1);
      finish();
      await Promise.resolve();
      advance(4500);
      expect(started).toBe(overlap ? 4 : 2);
    }
  });
});
