// The in-flight count a graceful stop waits on (server/invoke/drain.ts): work admitted until the
// drain begins, refused as `unavailable` after; the wait ends at zero, or when the grace of the
// injected clock runs out, saying how many were left.
import { describe, expect, it } from "vitest";
import { Code, ConnectError } from "@connectrpc/connect";
import { ManualClock } from "../../common/clock.js";
import { Drain, drainWithin } from "../../server/invoke/drain.js";

describe("Drain", () => {
  it("counts admitted work; a release counts once however often it is called", () => {
    const drain = new Drain();
    const a = drain.enter();
    const b = drain.enter();
    expect(drain.inFlight).toBe(2);
    a();
    a();
    expect(drain.inFlight).toBe(1);
    b();
    expect(drain.inFlight).toBe(0);
    expect(drain.draining).toBe(false);
  });

  it("refuses new work as unavailable once begun, while the work in flight may still finish", async () => {
    const drain = new Drain();
    const release = drain.enter();
    let idle = false;
    const done = drain.begin().then(() => (idle = true));
    expect(drain.draining).toBe(true);
    let refused: unknown;
    try {
      drain.enter();
    } catch (err) {
      refused = err;
    }
    expect(refused).toBeInstanceOf(ConnectError);
    expect((refused as ConnectError).code).toBe(Code.Unavailable);
    expect((refused as ConnectError).rawMessage).toContain("retry on another replica");
    await Promise.resolve();
    expect(idle).toBe(false);
    release();
    await done;
    expect(drain.inFlight).toBe(0);
  });

  it("drainWithin: 0 at once when nothing is in flight, whatever the grace", async () => {
    const clock = new ManualClock(0);
    await expect(drainWithin(new Drain(), clock, 5_000)).resolves.toBe(0);
    expect(clock.sleeping).toBe(0);
  });

  it("drainWithin: ends when the last work ends, before the grace, its timer gone", async () => {
    const clock = new ManualClock(0);
    const drain = new Drain();
    const release = drain.enter();
    const waiting = drainWithin(drain, clock, 5_000);
    await Promise.resolve();
    expect(clock.sleeping).toBe(1);
    clock.advance(4_000);
    release();
    await expect(waiting).resolves.toBe(0);
    expect(clock.sleeping).toBe(0);
  });

  it("drainWithin: when the grace runs out, how many are still in flight", async () => {
    const clock = new ManualClock(0);
    const drain = new Drain();
    drain.enter();
    drain.enter();
    const waiting = drainWithin(drain, clock, 5_000);
    clock.advance(4_999);
    clock.advance(1);
    await expect(waiting).resolves.toBe(2);
  });
});
