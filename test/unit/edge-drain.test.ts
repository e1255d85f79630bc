// The drain's rules (server/edge/drain.ts): how much of a body is read before answering.
import { describe, expect, it } from "vitest";
import { PassThrough } from "node:stream";
import { discardRest, drainBudget, EnvelopeTracker, restOfMessage } from "../../server/edge/drain.js";

const limits = { bytes: 100, quietMs: 50 };

describe("drainBudget", () => {
  it.each([
    { declared: undefined, read: 0, want: 100 },
    { declared: undefined, read: 40, want: 60 },
    { declared: undefined, read: 150, want: 0 },
    { declared: 100, read: 0, want: 100 },
    // The declaration says the body will not fit: answer at once.
    { declared: 101, read: 0, want: 0 },
    { declared: 50, read: 10, want: 90 },
  ])("declared $declared, read $read: $want", ({ declared, read, want }) => {
    expect(drainBudget(declared, read, limits)).toBe(want);
  });
});

async function* chunks(sizes: number[], thenHang = false): AsyncGenerator<Buffer> {
  for (const n of sizes) yield Buffer.alloc(n);
  if (thenHang) await new Promise(() => undefined);
}

describe("discardRest", () => {
  it("is true when the body ends within the budget", async () => {
    expect(await discardRest(chunks([30, 30]), 100, 10_000)).toBe(true);
  });
  it("is false once the budget is spent", async () => {
    expect(await discardRest(chunks([60, 60, 60]), 100, 10_000)).toBe(false);
  });
  it("is false with no budget, reading nothing", async () => {
    const body = chunks([1]);
    expect(await discardRest(body, 0, 10_000)).toBe(false);
    expect((await body.next()).done).toBe(false);
  });
  it("is false when the client goes quiet", async () => {
    expect(await discardRest(chunks([10], true), 100, 20)).toBe(false);
  });
});

function prefixed(length: number): Buffer {
  const head = Buffer.alloc(5);
  head.writeUInt32BE(length, 1);
  return head;
}

describe("restOfMessage", () => {
  // Each case writes its chunks and ends nothing: only the message's own bytes can settle it.
  it.each([
    { name: "the rest, when known", need: 10, chunks: [Buffer.alloc(4), Buffer.alloc(6)] },
    { name: "a whole message from its prefix", need: undefined, chunks: [prefixed(8), Buffer.alloc(8)] },
    {
      name: "a prefix split across chunks",
      need: undefined,
      chunks: [prefixed(3).subarray(0, 2), Buffer.concat([prefixed(3).subarray(2), Buffer.alloc(3)])],
    },
    { name: "nothing for a message over the bound", need: undefined, chunks: [prefixed(101)] },
  ])("waits for $name", async ({ need, chunks }) => {
    const stream = new PassThrough();
    const done = restOfMessage(stream, need, { bytes: 100, quietMs: 60_000 });
    for (const c of chunks) stream.write(c);
    await done;
  });

  it("does not wait at all when nothing is left, or more than the bound is", async () => {
    const stream = new PassThrough();
    await restOfMessage(stream, 0, { bytes: 100, quietMs: 60_000 });
    await restOfMessage(stream, 101, { bytes: 100, quietMs: 60_000 });
    expect(stream.listenerCount("data")).toBe(0);
  });

  it("stops at the stream's end, or when the client goes quiet", async () => {
    const ended = new PassThrough();
    const waiting = restOfMessage(ended, 50, { bytes: 100, quietMs: 60_000 });
    ended.end(Buffer.alloc(10));
    await waiting;
    await restOfMessage(new PassThrough(), 50, { bytes: 100, quietMs: 20 });
  });
});

describe("EnvelopeTracker", () => {
  const envelope = (length: number, body = length) => Buffer.concat([prefixed(length), Buffer.alloc(body)]);
  it.each([
    { name: "nothing yet", chunks: [] as Buffer[], want: 0 },
    { name: "a whole message", chunks: [envelope(10)], want: 0 },
    { name: "part of a message", chunks: [envelope(10, 4)], want: 6 },
    { name: "part of a prefix", chunks: [prefixed(10).subarray(0, 3)], want: 0 },
    { name: "a prefix split across chunks", chunks: [prefixed(10).subarray(0, 3), prefixed(10).subarray(3)], want: 10 },
    { name: "two messages, the second begun", chunks: [Buffer.concat([envelope(3), envelope(8, 2)])], want: 6 },
    { name: "an empty message", chunks: [envelope(0)], want: 0 },
  ])("$name: $want left", ({ chunks, want }) => {
    const tracker = new EnvelopeTracker();
    for (const c of chunks) tracker.push(c);
    expect(tracker.unfinished).toBe(want);
  });
});
