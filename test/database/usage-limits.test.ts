// Service keys' limits: the pure rules (server/usage/limit-rules.ts) as tables, and the shared
// counters (server/usage/limits.ts) on a real database, with two limiters standing for two
// control-plane replicas admitting concurrently: no limit is passed, and a database that is away
// leaves each replica its share.
import { afterAll, describe, expect, it } from "vitest";
import { randomUUID } from "node:crypto";
import { Code, ConnectError } from "@connectrpc/connect";
import { admit, current, reservationOf, settle, type KeyLimits, type Spend } from "../../server/usage/limit-rules.js";
import { KeyLimiter, limitHeader } from "../../server/usage/limits.js";
import { ManualClock } from "../../common/clock.js";
import { unreachableDatabase, useTestDatabase } from "../support/db.js";

const none: KeyLimits = { rpm: null, tpm: null, dailyTokens: null, monthlyTokens: null };
const t0 = Date.parse("2026-12-04T10:00:30Z");
const spend = (over: Partial<Spend> = {}): Spend => ({ ...current(undefined, t0), ...over });
const request = (body: Record<string, unknown>) => ({ body, bodyBytes: Buffer.byteLength(JSON.stringify(body)) });

describe("admit", () => {
  it.each([
    ["no limits", none, spend(), 16, true, undefined, undefined],
    ["under the rpm", { ...none, rpm: 2 }, spend({ minuteRequests: 1 }), 16, true, undefined, undefined],
    ["at the rpm", { ...none, rpm: 2 }, spend({ minuteRequests: 2 }), 16, false, "rpm", 30],
    ["the reservation past the tpm", { ...none, tpm: 100 }, spend({ minuteTokens: 90 }), 16, false, "tpm", 30],
    ["the reservation just within the tpm", { ...none, tpm: 100 }, spend({ minuteTokens: 84 }), 16, true, undefined, undefined],
    ["the day's quota used up", { ...none, dailyTokens: 1000 }, spend({ dayTokens: 990 }), 16, false, "dailyTokens", 50_370],
    [
      "a quota before a rate",
      { ...none, rpm: 1, monthlyTokens: 10 },
      spend({ minuteRequests: 1, monthTokens: 10 }),
      16,
      false,
      "monthlyTokens",
      2_383_170,
    ],
  ])("%s", (_what, limits, s, reserve, admitted, kind, retryAfterS) => {
    const a = admit(limits, s, reserve, t0);
    expect(a.admitted).toBe(admitted);
    if (!a.admitted) expect([a.kind, a.retryAfterS]).toEqual([kind, retryAfterS]);
  });

  it("starts a window again once it has passed", () => {
    const old = spend({ minuteRequests: 5, minuteTokens: 500, dayTokens: 500 });
    const a = admit({ ...none, rpm: 5, dailyTokens: 600 }, old, 16, t0 + 60_000);
    expect(a.admitted).toBe(true);
    if (a.admitted) expect([a.spend.minuteRequests, a.spend.minuteTokens, a.spend.dayTokens]).toEqual([1, 16, 516]);
  });
});

describe("settle", () => {
  it.each([
    ["used less than reserved", spend({ minuteTokens: 16, dayTokens: 16 }), t0, 16, 5, [5, 5]],
    ["used more (the prompt)", spend({ minuteTokens: 16, dayTokens: 16 }), t0, 16, 40, [40, 40]],
    ["its minute has passed: the day still settles", spend({ minuteTokens: 16, dayTokens: 16 }), t0, 16, 5, [0, 5], t0 + 60_000],
  ])("%s", (_what, s, admittedAt, reserved, used, [minute, day], now = t0) => {
    const after = settle(s, admittedAt, reserved, used, now as number);
    expect([after.minuteTokens, after.dayTokens]).toEqual([minute, day]);
  });

  it.each([
    [{ max_tokens: 100 }, 0, 100],
    [{ max_completion_tokens: 50 }, 0, 50],
    [{ max_tokens: 1_000_000 }, 0, 4096],
    [{ max_tokens: "many" }, 0, 16],
    [{}, 0, 16],
    // The body's bytes bound the prompt's tokens: 900 bytes and max_tokens 1.
    [{ max_tokens: 1 }, 900, 901],
    [{}, 2, 18],
  ])("reserves %j of %i bytes as %i", (body, bodyBytes, reserved) => {
    expect(reservationOf({ body, bodyBytes }, 4096)).toBe(reserved);
  });
});

describe("two replicas sharing a key's limits", () => {
  const test = useTestDatabase();
  const closers: (() => Promise<void>)[] = [];
  afterAll(async () => {
    for (const c of closers) await c();
  });

  it("admit exactly the rpm between them under concurrent requests, and refuse with retry-after", async () => {
    const clock = new ManualClock(t0);
    const replicas = [0, 1].map(() => new KeyLimiter({ prisma: test.db.prisma, clock, replicas: () => 2 }));
    const key = { keyId: randomUUID(), limits: { ...none, rpm: 10 } };
    const outcomes = await Promise.all(
      Array.from({ length: 30 }, (_, i) =>
        replicas[i % 2]!.admit(key, request({ max_tokens: 1 })).then(
          () => "admitted",
          (err: unknown) => err,
        ),
      ),
    );
    expect(outcomes.filter((o) => o === "admitted")).toHaveLength(10);
    const refusals = outcomes.filter((o) => o !== "admitted") as ConnectError[];
    expect(refusals.every((e) => e instanceof ConnectError && e.code === Code.ResourceExhausted)).toBe(true);
    expect(refusals[0]!.metadata.get("retry-after")).toBe("30");
    expect(refusals[0]!.metadata.get(limitHeader)).toBe("rpm");
    // The next minute admits again.
    clock.advance(60_000);
    await expect(replicas[0]!.admit(key, request({}))).resolves.toBeDefined();
  });

  it("hold a token limit to the tokens settled, never passing it: the prompt is reserved by its bytes", async () => {
    const clock = new ManualClock(t0);
    const replicas = [0, 1].map(() => new KeyLimiter({ prisma: test.db.prisma, clock, replicas: () => 2 }));
    const key = { keyId: randomUUID(), limits: { ...none, tpm: 1000 } };
    // Each request asks for 50 completion tokens and uses them all, with a 10-token prompt in a 40-byte body.
    let admitted = 0;
    let spent = 0;
    for (let round = 0; round < 20; round++) {
      const asked = { body: { max_tokens: 50 }, bodyBytes: 40 };
      const charges = await Promise.all([0, 1].map((r) => replicas[r]!.admit(key, asked).catch(() => undefined)));
      for (const c of charges) {
        if (c === undefined) continue;
        admitted++;
        spent += 60;
        c.settle(60);
      }
      await Promise.all(replicas.map((r) => r.flush()));
    }
    expect(spent).toBeLessThanOrEqual(1000);
    // Settling gives back what the bound over-reserved: 16 of 1000 / 60 requests fit, not 1000 / 90.
    expect(admitted).toBe(16);
    const row = await test.db.prisma.serviceKeySpend.findUnique({ where: { keyId: key.keyId } });
    expect(Number(row!.minuteTokens)).toBe(spent);
  });

  it("fall back to each replica's share while the database is away", async () => {
    const away = await unreachableDatabase();
    closers.push(away.close);
    const clock = new ManualClock(t0);
    const replica = new KeyLimiter({ prisma: away.prisma, clock, replicas: () => 2 });
    const key = { keyId: randomUUID(), limits: { ...none, rpm: 10 } };
    const outcomes = await Promise.all(
      Array.from({ length: 8 }, () =>
        replica.admit(key, request({})).then(
          () => true,
          () => false,
        ),
      ),
    );
    expect(outcomes.filter(Boolean)).toHaveLength(5);
  });
});
