// What the invoke path answers from its caches while the database is away: the rule (table), the
// cache over a manual clock (and its shared reads), and service keys over the real test database and an unreachable one:
// a key read within MODELFORGE_SERVICE_KEY_OUTAGE_TRUST is accepted, one read longer ago is not,
// 0 fails closed, and a revocation while the database is up still takes effect at once.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { Code, ConnectError } from "@connectrpc/connect";
import { cachedAnswer, LookupCache, type StaleAnswers } from "../../common/lookup-cache.js";
import { ManualClock } from "../../common/clock.js";
import { isDatabaseUnavailable, staleWhileDatabaseAway } from "../../server/db/availability.js";
import { ServiceKeys } from "../../server/identity/service-keys.js";
import type { PrismaClient } from "../../gen/prisma/client.js";
import type { DirectQuery } from "../../server/db/direct.js";
import { unreachableDatabase, useTestDatabase } from "../support/db.js";

const breakGlass = { actor: "break-glass" };

describe("cachedAnswer", () => {
  it.each([
    // age, ttl, stale for, source known away, answer
    [undefined, 5_000, 60_000, false, "load"],
    [undefined, 5_000, 60_000, true, "load"],
    [0, 5_000, 60_000, false, "fresh"],
    [4_999, 5_000, 60_000, true, "fresh"],
    [5_000, 5_000, 60_000, false, "load-or-stale"],
    [5_000, 5_000, 60_000, true, "stale"],
    [59_999, 5_000, 60_000, true, "stale"],
    [60_000, 5_000, 60_000, true, "load"],
    [60_000, 5_000, 60_000, false, "load"],
    [5_000, 5_000, 0, true, "load"],
    [3_600_000, 1_000, Infinity, true, "stale"],
  ] as const)("age %s, ttl %d, stale for %d, away %s: %s", (age, ttl, staleFor, away, answer) => {
    expect(cachedAnswer(age, ttl, staleFor, away)).toBe(answer);
  });
});

const unreachable = Object.assign(new Error("Can't reach database server"), { code: "P1001" });

describe("LookupCache with stale answers", () => {
  const setup = (forMs: number) => {
    const clock = new ManualClock(0);
    const away = { known: false };
    const stale: StaleAnswers = { forMs, unreachable: isDatabaseUnavailable, known: () => away.known };
    const cache = new LookupCache<string>(clock, 1_000, stale, 3);
    let loads = 0;
    let fail: Error | undefined;
    const get = (key: string) =>
      cache.get(key, async () => {
        loads++;
        if (fail !== undefined) throw fail;
        return `${key}@${clock.now()}`;
      });
    return { clock, away, cache, get, loads: () => loads, failWith: (e: Error | undefined) => (fail = e) };
  };

  it("answers what it read when the source cannot be reached, up to forMs after the read", async () => {
    const s = setup(10_000);
    expect(await s.get("a")).toBe("a@0");
    s.failWith(unreachable);
    s.clock.advance(5_000);
    expect(await s.get("a")).toBe("a@0");
    s.clock.advance(5_000);
    await expect(s.get("a")).rejects.toBe(unreachable);
    await expect(s.get("never-read")).rejects.toBe(unreachable);
  });

  it("does not try the source while it is known to be away", async () => {
    const s = setup(10_000);
    await s.get("a");
    s.away.known = true;
    s.clock.advance(2_000);
    const loads = s.loads();
    expect(await s.get("a")).toBe("a@0");
    expect(s.loads()).toBe(loads);
  });

  it("passes on any other failure: a bug or a bad request is not an outage", async () => {
    const s = setup(10_000);
    await s.get("a");
    const bug = new Error("column does not exist");
    s.failWith(bug);
    s.clock.advance(2_000);
    await expect(s.get("a")).rejects.toBe(bug);
  });

  it("makes room by dropping the entry read longest ago", async () => {
    const s = setup(Infinity);
    for (const k of ["a", "b", "c"]) await s.get(k);
    s.clock.advance(2_000);
    await s.get("a"); // read again: now the newest
    await s.get("d"); // full: "b" goes
    s.failWith(unreachable);
    s.clock.advance(2_000);
    for (const k of ["a", "c", "d"]) expect(await s.get(k)).toMatch(new RegExp(`^${k}@`));
    await expect(s.get("b")).rejects.toBe(unreachable);
  });

  it("reports the failure to the outage monitor, which then knows", async () => {
    const heard: unknown[] = [];
    const monitor = {
      lost: false,
      failed(err: unknown) {
        heard.push(err);
        this.lost = isDatabaseUnavailable(err);
        return this.lost;
      },
    };
    const stale = staleWhileDatabaseAway(60_000, monitor);
    expect(stale.known()).toBe(false);
    expect(stale.unreachable(unreachable)).toBe(true);
    expect(stale.known()).toBe(true);
    expect(heard).toEqual([unreachable]);
    expect(staleWhileDatabaseAway(60_000).unreachable(new Error("other"))).toBe(false);
  });
});

describe("LookupCache: reads in progress", () => {
  /** A source whose reads wait until the test lets each one finish. */
  const setup = () => {
    const clock = new ManualClock(0);
    const cache = new LookupCache<string>(clock, 1_000);
    let version = "v1";
    const reads: { finish(fail?: Error): void }[] = [];
    const get = (key: string) =>
      cache.get(
        key,
        () =>
          new Promise<string>((resolve, reject) => {
            const read = `${key}:${version}@${clock.now()}`;
            reads.push({ finish: (fail) => (fail ? reject(fail) : resolve(read)) });
          }),
      );
    return { clock, cache, get, reads, publish: (v: string) => (version = v) };
  };

  it("shares one read among the callers of a key not held, and of one expired", async () => {
    const s = setup();
    const both = Promise.all([s.get("a"), s.get("a")]);
    expect(s.reads).toHaveLength(1);
    s.reads[0]!.finish();
    expect(await both).toEqual(["a:v1@0", "a:v1@0"]);
    s.clock.advance(1_000);
    const burst = Promise.all([s.get("a"), s.get("a"), s.get("a")]);
    expect(s.reads).toHaveLength(2);
    s.reads[1]!.finish();
    expect(await burst).toEqual(["a:v1@1000", "a:v1@1000", "a:v1@1000"]);
    expect(await s.get("a")).toBe("a:v1@1000");
    expect(s.reads).toHaveLength(2);
  });

  it("a failed read fails every caller sharing it, and is not kept", async () => {
    const s = setup();
    const both = Promise.allSettled([s.get("a"), s.get("a")]);
    const broken = new Error("column does not exist");
    s.reads[0]!.finish(broken);
    expect((await both).map((r) => r.status)).toEqual(["rejected", "rejected"]);
    const again = s.get("a");
    expect(s.reads).toHaveLength(2);
    s.reads[1]!.finish();
    expect(await again).toBe("a:v1@0");
  });

  it("keeps nothing a read begun before a deletion returns, and does not share that read after it", async () => {
    const s = setup();
    const before = s.get("a"); // a read in progress...
    s.cache.delete("a"); // ...when a change drops the key
    s.publish("v2");
    const after = s.get("a");
    expect(s.reads).toHaveLength(2);
    s.reads[0]!.finish(); // the old read ends: its caller gets v1, and v1 is not stored
    expect(await before).toBe("a:v1@0");
    s.reads[1]!.finish();
    expect(await after).toBe("a:v2@0");
    expect(await s.get("a")).toBe("a:v2@0");
    expect(s.reads).toHaveLength(2);
  });

  it("a routing change dropping other keys also stops reads in progress from being kept", async () => {
    const s = setup();
    const before = s.get("b");
    s.cache.deleteWhere((key) => key === "a");
    s.reads[0]!.finish();
    await before;
    const after = s.get("b");
    expect(s.reads).toHaveLength(2);
    s.reads[1]!.finish();
    expect(await after).toBe("b:v1@0");
  });
});

describe("service keys while the database is away", () => {
  const test = useTestDatabase();
  let away: Awaited<ReturnType<typeof unreachableDatabase>>;
  beforeAll(async () => {
    away = await unreachableDatabase();
  });
  afterAll(async () => {
    await away?.close();
  });

  /** A replica's ServiceKeys whose database can be taken away and given back. */
  const replica = (clock: ManualClock, outageTrustMs: number) => {
    const state = { down: false };
    const prisma = new Proxy(test.db.prisma, {
      get: (real, name) => Reflect.get(state.down ? away.prisma : real, name),
    }) as PrismaClient;
    const direct: DirectQuery = (statement, values) => (state.down ? away.direct : test.db.direct)(statement, values);
    return { keys: new ServiceKeys({ prisma, direct, clock, outageTrustMs }), state };
  };
  const refusal = (p: Promise<unknown>) =>
    p.then(
      () => "accepted",
      (err: unknown) => (err instanceof ConnectError ? Code[err.code] : isDatabaseUnavailable(err) ? "database unavailable" : String(err)),
    );

  it("reads a key as stored: its scope and its limits, past 32 bits too", async () => {
    const clock = new ManualClock(Date.now());
    const { keys } = replica(clock, 0);
    const limits = { rpm: 7, tpm: 700, dailyTokens: 5_000_000_000, monthlyTokens: 90_000_000_000 };
    const { row, secret } = await keys.create({ name: "limited", deployments: ["tiny", "chat"], ttlMs: 60_000, limits }, "c0", breakGlass);
    expect(await keys.authenticate(secret)).toEqual({ keyId: row.id, deployments: new Set(["chat", "tiny"]), limits });
    const { secret: open } = await keys.create({ name: "unlimited", deployments: ["tiny"], ttlMs: undefined }, "c0b", breakGlass);
    expect((await keys.authenticate(open)).limits).toEqual({ rpm: null, tpm: null, dailyTokens: null, monthlyTokens: null });
    // Its expiry came from the database too.
    clock.advance(60_000);
    expect(await refusal(keys.authenticate(secret))).toBe("Unauthenticated");
  });

  it("accepts a key read within the trust window, refuses it after, and never one not read", async () => {
    const clock = new ManualClock(Date.now());
    const { keys, state } = replica(clock, 60_000);
    const { secret } = await keys.create({ name: "trusted", deployments: ["tiny"], ttlMs: undefined }, "c1", breakGlass);
    const { secret: unread } = await keys.create({ name: "unread", deployments: ["tiny"], ttlMs: undefined }, "c2", breakGlass);
    expect((await keys.authenticate(secret)).deployments).toEqual(new Set(["tiny"]));
    state.down = true;
    clock.advance(30_000);
    expect(await refusal(keys.authenticate(secret))).toBe("accepted");
    expect(await refusal(keys.authenticate(unread))).toBe("database unavailable");
    clock.advance(30_000);
    expect(await refusal(keys.authenticate(secret))).toBe("database unavailable");
    // Back: read afresh, trusted again.
    state.down = false;
    expect(await refusal(keys.authenticate(secret))).toBe("accepted");
  });

  it("an expiry still applies to a trusted key", async () => {
    const clock = new ManualClock(Date.now());
    const { keys, state } = replica(clock, 600_000);
    const { secret } = await keys.create({ name: "short", deployments: ["tiny"], ttlMs: 20_000 }, "c3", breakGlass);
    await keys.authenticate(secret);
    state.down = true;
    clock.advance(20_000);
    expect(await refusal(keys.authenticate(secret))).toBe("Unauthenticated");
  });

  it("0 fails closed once the key's cache lifetime is over", async () => {
    const clock = new ManualClock(Date.now());
    const { keys, state } = replica(clock, 0);
    const { secret } = await keys.create({ name: "closed", deployments: ["tiny"], ttlMs: undefined }, "c4", breakGlass);
    await keys.authenticate(secret);
    state.down = true;
    clock.advance(4_000);
    expect(await refusal(keys.authenticate(secret))).toBe("accepted");
    clock.advance(1_000);
    expect(await refusal(keys.authenticate(secret))).toBe("database unavailable");
  });

  it("a revocation while the database is up: at once here, within the cache lifetime on another replica, unseen there in an outage within the window", async () => {
    const clock = new ManualClock(Date.now());
    const here = replica(clock, 60_000);
    const other = replica(clock, 60_000);
    const a = await here.keys.create({ name: "revoked-here", deployments: ["tiny"], ttlMs: undefined }, "c5", breakGlass);
    const b = await here.keys.create({ name: "revoked-there", deployments: ["tiny"], ttlMs: undefined }, "c6", breakGlass);
    for (const k of [a, b]) {
      await here.keys.authenticate(k.secret);
      await other.keys.authenticate(k.secret);
    }
    await here.keys.revoke(a.row.id, "", "c7", breakGlass);
    expect(await refusal(here.keys.authenticate(a.secret))).toBe("Unauthenticated");
    // The other replica sees it when its cached read runs out.
    expect(await refusal(other.keys.authenticate(a.secret))).toBe("accepted");
    clock.advance(5_000);
    expect(await refusal(other.keys.authenticate(a.secret))).toBe("Unauthenticated");
    // Revoked just before an outage: the other replica, which cannot read it, trusts its last read.
    await here.keys.revoke(b.row.id, "", "c8", breakGlass);
    here.state.down = true;
    other.state.down = true;
    expect(await refusal(here.keys.authenticate(b.secret))).toBe("database unavailable");
    expect(await refusal(other.keys.authenticate(b.secret))).toBe("accepted");
  });
});
