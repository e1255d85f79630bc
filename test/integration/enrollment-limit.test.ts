// Failed enrollments are limited per peer address and logged without flooding: the pure rules as
// tables with an injected clock, and token-guessing runs against the real server, one at a time and
// in a concurrent burst with a real CSR, held to the documented five. The agent's own enrollment
// waits as the server tells it to: behind an address with failures on it, and in a rack of nodes
// behind one NAT enrolling at once.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { Code, ConnectError, createClient } from "@connectrpc/connect";
import { grpcTransport } from "../../common/http2-sessions.js";
import { AgentService } from "../../gen/proto/modelforge/agent/v1/agent_pb.js";
import { generateNodeKeyAndCsr } from "../../agent/pki/keys.js";
import { FailureLimiter, peerKey } from "../../server/identity/enrollment/failure-limit.js";
import { FloodGate } from "../../server/observability/flood-log.js";
import { startTestServer, type TestServer } from "../support/server.js";
import { eventually } from "../support/node.js";
import { ManualClock } from "../../common/clock.js";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { enrollNode } from "../../agent/enroll.js";

describe("FailureLimiter", () => {
  const policy = { burst: 3, refillMs: 1_000, maxPeers: 2 };
  // Each step: [what, at (ms), action on peer "a" unless named, expected wait from admit() (admit steps only; 0: admitted)]
  const steps: [string, number, "admit" | "fail" | "ok", number | undefined, string?][] = [
    ["a stranger may try", 0, "admit", 0],
    ["first failure", 0, "fail", undefined],
    ["second try", 10, "admit", 0],
    ["second failure", 10, "fail", undefined],
    ["third try", 20, "admit", 0],
    ["third failure empties the bucket", 20, "fail", undefined],
    ["refused while empty", 20, "admit", 980],
    ["still waiting", 500, "admit", 500],
    ["one token back", 1_020, "admit", 0],
    ["a failure then costs that token again (the 20 ms of partial refill stay)", 1_020, "fail", undefined],
    ["the wait only shrinks", 1_520, "admit", 480],
    ["fully recovered after burst x refill", 4_100, "admit", 0],
    ["a success gives its token back", 4_100, "ok", undefined],
    ["another peer is unaffected", 4_100, "admit", 0, "b"],
  ];
  it("follows the table", () => {
    const limiter = new FailureLimiter(policy);
    for (const [what, at, action, want, peer = "a"] of steps) {
      if (action === "admit") expect(limiter.admit(peer, at)?.waitMs ?? 0, what).toBe(want);
      else limiter.settle(peer, at, action === "fail");
    }
  });
  it("holds attempts in flight to the bound: a sixth concurrent one waits a second, a guessing burst the full refill", () => {
    const limiter = new FailureLimiter({ burst: 5, refillMs: 5_000, maxPeers: 10 });
    const admitted = () => Array.from({ length: 7 }, () => limiter.admit("a", 0));
    const busy = { cause: "in_flight", waitMs: 1_000 };
    expect(admitted()).toEqual([undefined, undefined, undefined, undefined, undefined, busy, busy]);
    for (let i = 0; i < 5; i++) limiter.settle("a", 0, false); // five real enrollments
    expect(limiter.size).toBe(0);
    expect(admitted()).toEqual([undefined, undefined, undefined, undefined, undefined, busy, busy]);
    for (let i = 0; i < 5; i++) limiter.settle("a", 0, true); // five guesses
    expect(limiter.admit("a", 0)).toEqual({ cause: "failures", waitMs: 5_000 });
    expect(limiter.admit("a", 5_000)).toBeUndefined();
  });
  it("tells attempts in flight from failures: a peer is refused for its failures only when it has no token of its own left", () => {
    const limiter = new FailureLimiter({ burst: 3, refillMs: 1_000, maxPeers: 10 });
    // [what, action, expected refusal of an admit() at that point]
    const steps: [string, "admit" | "fail", ReturnType<FailureLimiter["admit"]>][] = [
      ["a failure leaves two tokens", "fail", undefined],
      ["both taken by attempts in flight", "admit", undefined],
      ["", "admit", undefined],
      ["a third waits on them, not on its failure", "admit", { cause: "in_flight", waitMs: 1_000 }],
      ["one fails: one token left, held by the attempt still in flight", "fail", undefined],
      ["refused for its attempt in flight", "admit", { cause: "in_flight", waitMs: 1_000 }],
      ["the last attempt fails too: no token left", "fail", undefined],
      ["refused for its failures, the whole refill", "admit", { cause: "failures", waitMs: 1_000 }],
    ];
    limiter.admit("a", 0);
    for (const [what, action, want] of steps) {
      if (action === "fail") limiter.settle("a", 0, true);
      else expect(limiter.admit("a", 0), what).toEqual(want);
    }
  });
  it("forgets the least recently active peer when full, and a recovered one at once", () => {
    const limiter = new FailureLimiter(policy);
    for (const peer of ["a", "b", "c"]) {
      for (let i = 0; i < 3; i++) {
        limiter.admit(peer, 0);
        limiter.settle(peer, 0, true);
      }
    }
    expect(limiter.size).toBe(2);
    expect(limiter.admit("a", 0)).toBeUndefined(); // evicted, so a stranger again
    expect(limiter.admit("c", 0)).toEqual({ cause: "failures", waitMs: 1_000 });
    limiter.settle("b", 10_000, false); // settling a forgotten or idle peer is harmless
    expect(limiter.admit("c", 10_000)).toBeUndefined();
    limiter.settle("c", 10_000, false);
    expect(limiter.size).toBe(1);
  });
  it.each([
    ["127.0.0.1", "127.0.0.1"],
    ["::ffff:10.1.2.3", "10.1.2.3"],
    ["2001:db8:1:2:3:4:5:6", "2001:db8:1:2::/64"],
    ["2001:db8:1:2::ffff", "2001:db8:1:2::/64"],
    ["2001:db8::1", "2001:db8:0:0::/64"],
    ["::1", "0:0:0:0::/64"],
    [undefined, "unknown"],
  ])("keys %s as %s", (address, key) => {
    expect(peerKey(address)).toBe(key);
  });
});

describe("FloodGate", () => {
  it("logs the first events of a window, counts the rest, and summarises them once the window ends", () => {
    const gate = new FloodGate({ firstPerWindow: 2, windowMs: 1_000, maxPeers: 2, topPeers: 1 });
    const got = [gate.note("a", 0), gate.note("a", 1), gate.note("a", 2), gate.note("b", 3), gate.note("a", 4), gate.note("c", 5)];
    expect(got).toEqual([true, true, false, false, false, false]);
    expect(gate.close(999)).toBeUndefined(); // not over yet
    expect(gate.close(1_000)).toEqual({ suppressed: 4, peers: 2, top: [{ peer: "a", count: 2 }], windowMs: 1_000 });
    expect(gate.note("a", 1_001)).toBe(true); // a new window
    expect(gate.close(2_001)).toBeUndefined(); // nothing suppressed in it
  });
});

describe("enrollment guessing against the real server", () => {
  let ts: TestServer;
  // The limiter and the log's windows run on the server's clock: the test moves it.
  const clock = new ManualClock();
  beforeAll(async () => {
    ts = await startTestServer({}, { clock });
  });
  afterAll(async () => {
    await ts?.stop();
  });

  // The connection's source address (any of 127/8 on loopback); net.connect takes it, the TLS types omit it.
  const clientFrom = (localAddress: string) =>
    createClient(AgentService, grpcTransport({ baseUrl: ts.url, nodeOptions: { ca: ts.caPem, ...({ localAddress } as object) } }));

  it("refuses a guessing peer with resource_exhausted after a few, logs it briefly, and lets others and the penalty's end through", async () => {
    const { csrPem } = await generateNodeKeyAndCsr("guesser");
    const attacker = clientFrom("127.0.0.1"); // one client, one HTTP/2 connection
    const codes = new Map<Code, number>();
    let exhausted: ConnectError | undefined;
    for (let i = 0; i < 2_000; i++) {
      const err = await attacker.enroll({ token: `mfet_guess-${i}`, csrPem }).then(
        () => undefined,
        (e: unknown) => e as ConnectError,
      );
      const code = err?.code ?? Code.Unknown;
      codes.set(code, (codes.get(code) ?? 0) + 1);
      if (code === Code.ResourceExhausted) exhausted = err;
    }
    // Five, then nothing while the clock stands still (a token comes back every five seconds).
    expect(codes.get(Code.Unauthenticated)).toBe(5);
    expect(codes.get(Code.ResourceExhausted)).toBe(1_995);
    expect([...codes.keys()].sort()).toEqual([Code.Unauthenticated, Code.ResourceExhausted].sort());
    expect(exhausted!.rawMessage).toMatch(/^too many failed enrollments from this address; retry in \d+ s$/);
    const retryAfter = Number(exhausted!.metadata.get("retry-after"));
    expect(retryAfter).toBe(5);

    // The log at the production level (info and up): a few lines, each with the peer, no tokens.
    const lines = () =>
      ts
        .logs()
        .split("\n")
        .filter((l) => l !== "" && (JSON.parse(l) as { level: number }).level >= 30);
    const refusals = lines().filter((l) => l.includes("enrollment refused"));
    expect(lines().length).toBeLessThan(50);
    expect(refusals.length).toBeGreaterThanOrEqual(1);
    for (const l of refusals.filter((l) => !l.includes("summary"))) expect(JSON.parse(l)).toMatchObject({ peer: "127.0.0.1", level: 40 });
    expect(ts.logs()).not.toContain("mfet_guess");

    // Another address enrolls with a good token at once.
    const bystander = clientFrom("127.0.0.2");
    const good = await ts.admin.createEnrollmentToken({ nodeName: "bystander" });
    expect((await bystander.enroll({ token: good.token, csrPem: (await generateNodeKeyAndCsr("bystander")).csrPem })).nodeId).not.toBe("");

    // The guessing address, holding a real token now: refused until the penalty lapses (the token
    // is not even looked at, so not used up), then enrolled.
    const real = await ts.admin.createEnrollmentToken({ nodeName: "late" });
    const ownCsr = (await generateNodeKeyAndCsr("late")).csrPem;
    const refused = await attacker.enroll({ token: real.token, csrPem: ownCsr }).then(
      () => undefined,
      (e: unknown) => e as ConnectError,
    );
    expect(refused?.code).toBe(Code.ResourceExhausted);
    clock.advance(4_999);
    const early = await attacker.enroll({ token: real.token, csrPem: ownCsr }).then(
      () => undefined,
      (e: unknown) => e as ConnectError,
    );
    expect(early?.code).toBe(Code.ResourceExhausted);
    clock.advance(1);
    const enrolled = await attacker.enroll({ token: real.token, csrPem: ownCsr });
    expect(enrolled.nodeId).not.toBe("");

    // One summary line per ten-second window accounts for the rest: counts and the busiest address.
    type Summary = { suppressed: number; peers: number; top: { peer: string; count: number }[] };
    const summaries = () =>
      lines()
        .filter((l) => l.includes("enrollment refused (summary"))
        .map((l) => JSON.parse(l) as Summary);
    // The window is over: the next refusal closes it with its summary first.
    clock.advance(10_000);
    await attacker.enroll({ token: "mfet_guess-after", csrPem }).catch(() => undefined);
    await eventually(
      () => summaries().reduce((n, s) => n + s.suppressed, 0) + refusals.length >= 2_000,
      20_000,
      "summaries of every refusal",
    );
    for (const s of summaries()) expect(s.top[0]!.peer).toBe("127.0.0.1");
  }, 300_000);

  it("holds a concurrent burst of guesses with a real CSR to five, and real enrollments to five in flight", async () => {
    // Eight connections from one address, so the attempts really overlap on the server.
    const guessers = Array.from({ length: 8 }, () => clientFrom("127.0.0.3"));
    const { csrPem } = await generateNodeKeyAndCsr("burst");
    const codeOf = (p: Promise<unknown>) =>
      p.then(
        () => ({ code: 0 as Code | 0, retryAfter: null as string | null, message: "" }),
        (e: unknown) => {
          const err = ConnectError.from(e);
          return { code: err.code as Code | 0, retryAfter: err.metadata.get("retry-after"), message: err.rawMessage };
        },
      );
    const guesses = await Promise.all(
      Array.from({ length: 40 }, (_, i) => codeOf(guessers[i % 8]!.enroll({ token: `mfet_burst-${i}`, csrPem }))),
    );
    const count = (rs: { code: Code | 0 }[], code: Code | 0) => rs.filter((r) => r.code === code).length;
    // The clock stands still: exactly the documented five are looked at, however many arrive together.
    expect(count(guesses, Code.Unauthenticated)).toBe(5);
    expect(count(guesses, Code.ResourceExhausted)).toBe(35);

    // Twelve nodes with real tokens behind one address, all at once: at most five in flight; the
    // others are told to retry within a second, and then enroll (a success costs nothing).
    const fleet = clientFrom("127.0.0.4");
    const tokens = await Promise.all(Array.from({ length: 12 }, (_, i) => ts.admin.createEnrollmentToken({ nodeName: `fleet-${i}` })));
    const requests = await Promise.all(
      tokens.map(async (t, i) => ({ token: t.token, csrPem: (await generateNodeKeyAndCsr(`fleet-${i}`)).csrPem })),
    );
    const first = await Promise.all(requests.map((r) => codeOf(fleet.enroll(r))));
    const held = first.flatMap((r, i) => (r.code === 0 ? [] : [{ ...r, i }]));
    expect(count(first, 0)).toBeGreaterThanOrEqual(5);
    for (const h of held) {
      expect(h).toMatchObject({ code: Code.ResourceExhausted, retryAfter: "1" });
      // Said as what it is: nothing failed, the address has its five attempts running.
      expect(h.message).toBe("too many enrollments in flight from this address (at most 5 at once); retry in 1 s");
    }
    for (const h of held) expect((await fleet.enroll(requests[h.i]!)).nodeId).not.toBe("");
  }, 120_000);
});

describe("the agent's enrollment behind a busy address", () => {
  let ts: TestServer;
  let dir: string;
  beforeAll(async () => {
    ts = await startTestServer({});
    dir = mkdtempSync(join(tmpdir(), "mf-enroll-nat-"));
  });
  afterAll(async () => {
    await ts?.stop();
    if (dir) rmSync(dir, { recursive: true, force: true });
  });
  const tokenFor = async (name: string) => (await ts.admin.createEnrollmentToken({ nodeName: name })).token;
  const enroll = async (name: string, waits: number[], reasons: string[] = [], given?: string) => {
    const token = given ?? (await tokenFor(name));
    return enrollNode({
      serverUrl: ts.url,
      token,
      caFingerprint: ts.server.ca.fingerprint,
      statePath: join(dir, name, "state.json"),
      sleep: async (ms) => {
        waits.push(ms);
        await new Promise((r) => setTimeout(r, ms));
      },
      onBusy: (_, reason) => reasons.push(reason),
    });
  };

  it("waits out a neighbour's failures as told, then enrolls", async () => {
    // Five bad tokens from this address (a neighbour behind the same NAT mistyping) empty its bucket.
    const { csrPem } = await generateNodeKeyAndCsr("neighbour");
    const neighbour = createClient(AgentService, grpcTransport({ baseUrl: ts.url, nodeOptions: { ca: ts.caPem } }));
    for (let i = 0; i < 5; i++) await neighbour.enroll({ token: `mfet_${"B".repeat(42)}${i}`, csrPem }).catch(() => undefined);
    const waits: number[] = [];
    const reasons: string[] = [];
    const state = await enroll("after-neighbour", waits, reasons);
    expect(state.nodeId).toMatch(/^[0-9a-f-]{36}$/);
    // What `agent enroll` prints while it waits: the server's reason.
    expect(reasons[0]).toMatch(/^too many failed enrollments from this address; retry in \d s$/);
    // Told "retry in 5 s": each wait is in the second half of what was asked, never longer.
    expect(waits.length).toBeGreaterThanOrEqual(1);
    for (const w of waits) expect(w).toBeLessThanOrEqual(5_000);
  }, 60_000);

  it("enrolls a rack of 24 nodes behind one address at once: every one, taking turns", async () => {
    const waits: number[] = [];
    // The operator makes the rack's tokens first, one after another, as `forge tokens create` would:
    // what runs at once is the 24 agents' enrollments, not 24 token creations queued on the
    // embedded database's one connection beside them.
    const tokens: string[] = [];
    for (let i = 0; i < 24; i++) tokens.push(await tokenFor(`rack-${i}`));
    const states = await Promise.all(tokens.map((token, i) => enroll(`rack-${i}`, waits, [], token)));
    expect(new Set(states.map((s) => s.nodeId)).size).toBe(24);
  }, 120_000);
});
