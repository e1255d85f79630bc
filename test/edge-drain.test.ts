// The drain's rules (server/edge/drain.ts): how much of a body is read before answering.
import { describe, expect, it } from "vitest";
import { discardRest, drainBudget } from "../server/edge/drain.js";

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
