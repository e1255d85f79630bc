// The async queue (common/queue.ts), bounded by the weight its consumer has not taken: the relay's
// outbox toward a caller (server/invoke/outbox.ts) bounds a stream's unread bytes with it.
import { describe, expect, it } from "vitest";
import { AsyncQueue } from "../../../common/queue.js";

const bounded = (max: number) => new AsyncQueue<string>({ max, weigh: (s) => s.length });

describe("a bounded queue", () => {
  it.each([
    ["within the bound", [4, 4], 10, [true, true]],
    ["past the bound", [4, 4, 4], 10, [true, true, false]],
    ["exactly at the bound", [5, 5], 10, [true, true]],
    ["one item alone, however heavy: a consumer that keeps up is never refused", [100], 10, [true]],
    ["a heavy item behind another", [1, 100], 10, [true, false]],
  ])("%s", (_what, sizes, max, accepted) => {
    const queue = bounded(max);
    expect(sizes.map((n) => queue.push("x".repeat(n)))).toEqual(accepted);
  });

  it("gives back room as the consumer takes items, and ends after the last", async () => {
    const queue = bounded(8);
    queue.push("aaaa");
    queue.push("bbbb");
    expect(queue.push("cccc")).toBe(false);
    const it = queue[Symbol.asyncIterator]();
    expect((await it.next()).value).toBe("aaaa");
    expect(queue.untakenWeight).toBe(4);
    expect(queue.push("cccc")).toBe(true);
    queue.end();
    expect(queue.push("dddd")).toBe(false);
    expect((await it.next()).value).toBe("bbbb");
    expect((await it.next()).value).toBe("cccc");
    expect((await it.next()).done).toBe(true);
  });

  it("says when its consumer waits for an item, and wakes it", async () => {
    const queue = bounded(8);
    const it = queue[Symbol.asyncIterator]();
    const next = it.next();
    await Promise.resolve();
    expect(queue.consumerWaiting).toBe(true);
    queue.push("a");
    expect((await next).value).toBe("a");
    expect(queue.consumerWaiting).toBe(false);
  });

  it("counts an item pushed to a consumer already waiting as taken, even when more follow in the same turn", async () => {
    const queue = bounded(10);
    const it = queue[Symbol.asyncIterator]();
    const next = it.next();
    await Promise.resolve();
    // Three pushed at once (one read of the socket): the first is the waiting consumer's.
    expect([queue.push("aaaa"), queue.push("bbbb"), queue.push("cccc")]).toEqual([true, true, true]);
    expect(queue.untakenWeight).toBe(8);
    expect(queue.push("dddd")).toBe(false);
    expect((await next).value).toBe("aaaa");
    expect(queue.untakenWeight).toBe(8);
    expect((await it.next()).value).toBe("bbbb");
    expect(queue.untakenWeight).toBe(4);
  });

  it("drops what is untaken on a failure, and the consumer gets the error; an end before it holds", async () => {
    const queue = bounded(8);
    queue.push("aaaa");
    queue.fail(new Error("stalled"));
    expect(queue.untakenWeight).toBe(0);
    await expect(queue[Symbol.asyncIterator]().next()).rejects.toThrow("stalled");
    const ended = bounded(8);
    ended.push("a");
    ended.end();
    ended.fail(new Error("late"));
    expect((await ended[Symbol.asyncIterator]().next()).value).toBe("a");
  });
});
