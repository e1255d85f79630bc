// The relay's and service keys' pure rules, table-driven, and the relay itself over an in-memory
// routing fake and a fake node session (no network): routing, typed refusals, the in-flight bound,
// deadlines, the caller going away, a routing change dropping the cache at once.
import { describe, expect, it } from "vitest";
import { create, fromBinary } from "@bufbuild/protobuf";
import { Code, type ConnectError } from "@connectrpc/connect";
import { pino } from "pino";
import { InvokeApi } from "../../gen/proto/modelforge/deployment/v1/deployment_pb.js";
import { SessionRequestSchema, SessionResponseSchema, type SessionResponse } from "../../gen/proto/modelforge/agent/v1/agent_pb.js";
import { InFlight, invokeTimeoutMs, nodeRefusal, pickReplica, routeInvoke } from "../../server/invoke/rules.js";
import { InvokeRelay, type InvokeCall, type InvokeForwarder } from "../../server/invoke/relay.js";
import { InvokeCounts } from "../../server/invoke/counts.js";
import { LogWatches } from "../../server/invoke/logs.js";
import type { DeploymentRoutes, DeploymentTarget } from "../../server/invoke/routes.js";
import type { SessionHolder } from "../../server/cluster/replicas.js";
import { SessionRegistry } from "../../server/sessions/registry.js";
import type { InvokePush, LiveSession } from "../../server/node-sessions.js";
import { invokeStartBytes } from "../../server/sessions/invoke-wire.js";
import { ManualClock } from "../../common/clock.js";
import {
  bearerServiceKey,
  checkServiceKeyInput,
  looksLikeServiceKey,
  noLimits,
  serviceKeyState,
} from "../../server/identity/service-keys.js";
import { refuseForeignCredentials, refuseServiceKeyElsewhere } from "../../server/identity/service-keys-auth.js";
import { cleanLine, WatchOutbox, defaultLogLimits } from "../../agent/deployments/logs.js";
import { Gate } from "../../agent/deployments/host.js";
import { fitMessage, refusalCode } from "../../agent/deployments/refusal.js";
import { OpenAiClientError } from "../../agent/engines/openai-client.js";
import { Drain } from "../../server/invoke/drain.js";

const target = (over: Partial<DeploymentTarget> = {}): DeploymentTarget => ({
  deploymentId: "d1",
  name: "tiny",
  phase: "READY",
  createdAt: 0,
  maxInFlight: 2,
  invokeTimeoutMs: 60_000,
  ready: [{ revision: 2n, replica: 0, nodeId: "n1", phase: "READY", engine: "llama.cpp", embeddings: false, runtimeId: "" }],
  ...over,
});
const codeOf = (f: () => unknown) => {
  try {
    f();
  } catch (err) {
    return (err as ConnectError).code;
  }
  return undefined;
};

describe("routing an invoke", () => {
  const scope = new Set(["tiny"]);
  const up = () => true;
  it.each([
    ["no such deployment", undefined, Code.NotFound],
    ["outside the key's scope", target({ name: "other" }), Code.NotFound],
    ["draining", target({ phase: "DRAINING" }), Code.Unavailable],
    ["loading, nothing ready", target({ phase: "LOADING", ready: [] }), Code.FailedPrecondition],
    ["unloaded", target({ phase: "UNLOADED", ready: [] }), Code.FailedPrecondition],
    ["failed", target({ phase: "FAILED", ready: [] }), Code.FailedPrecondition],
  ])("%s: refused", (_what, t, code) => {
    expect(codeOf(() => routeInvoke(t, scope, "tiny", up))).toBe(code);
  });
  it("takes every ready replica whose node's session is here; else every ready one is a candidate elsewhere", () => {
    const t = target({
      ready: [
        { revision: 3n, replica: 0, nodeId: "n2", phase: "READY", engine: "llama.cpp", embeddings: false, runtimeId: "" },
        { revision: 2n, replica: 0, nodeId: "n1", phase: "READY", engine: "llama.cpp", embeddings: false, runtimeId: "" },
      ],
    });
    expect(routeInvoke(t, scope, "tiny", up)).toEqual({ here: t.ready });
    expect(routeInvoke(t, scope, "tiny", (n) => n === "n1")).toEqual({ here: [t.ready[1]] });
    expect(routeInvoke(t, scope, "tiny", () => false)).toEqual({ elsewhere: t.ready });
  });

  it("a degraded deployment still routes to its ready replicas; a pending one has none", () => {
    expect(routeInvoke(target({ phase: "DEGRADED" }), scope, "tiny", up)).toEqual({ here: target().ready });
    expect(codeOf(() => routeInvoke(target({ phase: "PENDING", ready: [] }), scope, "tiny", up))).toBe(Code.FailedPrecondition);
  });

  describe("power of two choices", () => {
    const replicas = ["a", "b", "c", "d"];
    // Loads as [in flight through this control plane, queued on the node by its last heartbeat].
    it.each([
      ["one candidate is the only choice", ["a"], {}, [0.9], "a"],
      ["none", [], {}, [0.5], undefined],
      ["of the two drawn, the less loaded wins", replicas, { a: [1, 0], b: [0, 0], c: [0, 0] }, [0, 0], "b"],
      ["the first drawn wins a tie", replicas, { a: [1, 0], b: [1, 0] }, [0, 0], "a"],
      ["a replica at its bound is never drawn", ["a", "b"], { a: [2, 0], b: [0, 0] }, [0, 0], "b"],
      ["all at their bound: none", ["a", "b"], { a: [2, 0], b: [2, 0] }, [0, 0], undefined],
      ["never the same replica twice in one draw", ["a", "b"], {}, [0.99, 0.99], "b"],
      ["the node's queue counts: idle here but queued there loses", ["a", "b"], { a: [0, 3], b: [1, 0] }, [0, 0], "b"],
      ["local in flight plus the queue: 1 + 1 beats 0 + 3", ["a", "b"], { a: [0, 3], b: [1, 1] }, [0, 0], "b"],
      ["a tie of the sums goes to the first drawn", ["a", "b"], { a: [1, 1], b: [0, 2] }, [0, 0], "a"],
      ["the bound is on the local count only: a long queue elsewhere still takes one", ["a"], { a: [1, 50] }, [0], "a"],
      ["all queued, the shortest queue", ["a", "b"], { a: [0, 4], b: [0, 2] }, [0, 0], "b"],
    ] as const)("%s", (_name, candidates, load, draws, want) => {
      const queue = [...draws];
      const pick = pickReplica(
        candidates,
        (c) => {
          const [inFlight, queued] = (load as Record<string, readonly [number, number]>)[c] ?? [0, 0];
          return { inFlight, queued };
        },
        2,
        () => queue.shift() ?? 0,
      );
      expect(pick).toBe(want);
    });
    it("spreads evenly: over 10,000 picks with equal load each of four replicas gets 20-30 %", () => {
      let seed = 42;
      const random = () => {
        seed = (seed * 1103515245 + 12345) % 2 ** 31;
        return seed / 2 ** 31;
      };
      const counts = new Map<string, number>();
      for (let k = 0; k < 10_000; k++) {
        const c = pickReplica(replicas, () => ({ inFlight: 0, queued: 0 }), 0, random)!;
        counts.set(c, (counts.get(c) ?? 0) + 1);
      }
      for (const r of replicas) expect(counts.get(r)! / 10_000).toBeGreaterThan(0.2);
      for (const r of replicas) expect(counts.get(r)! / 10_000).toBeLessThan(0.3);
    });
  });
  it.each([
    [undefined, 60_000, 30_000],
    [5_000, 60_000, 5_000],
    [90_000, 60_000, 60_000],
    [90_000, 0, 90_000],
  ])("timeout: caller %s, deployment %d -> %d", (req, dep, want) => expect(invokeTimeoutMs(req, dep)).toBe(want));
  it("maps a node's refusal by code name; an unknown name is internal", () => {
    expect(nodeRefusal("resource_exhausted", "busy").code).toBe(Code.ResourceExhausted);
    expect(nodeRefusal("deadline_exceeded", "slow").code).toBe(Code.DeadlineExceeded);
    expect(nodeRefusal("no_such_code", "x").code).toBe(Code.Internal);
  });
  it("bounds requests in flight per deployment", () => {
    const f = new InFlight();
    expect([f.acquire("d", 2), f.acquire("d", 2), f.acquire("d", 2), f.acquire("e", 2)]).toEqual([true, true, false, true]);
    f.release("d");
    expect(f.acquire("d", 2)).toBe(true);
  });
});

describe("service key rules", () => {
  it.each([
    ["Bearer mfsk_abc", "mfsk_abc"],
    ["bearer   mfsk_abc ", "mfsk_abc"],
    ["Bearer other", undefined],
    ["mfsk_abc", undefined],
    [null, undefined],
  ])("bearer %s", (header, want) => expect(bearerServiceKey(header)).toBe(want));
  it("refuses a service key anywhere else, and foreign credentials on DeploymentService", () => {
    expect(looksLikeServiceKey("Basic mfsk_x")).toBe(true);
    expect(codeOf(() => refuseServiceKeyElsewhere("Bearer mfsk_x"))).toBe(Code.PermissionDenied);
    expect(codeOf(() => refuseServiceKeyElsewhere(null))).toBeUndefined();
    expect(codeOf(() => refuseForeignCredentials({ certificatePresented: true, adminToken: null }))).toBe(Code.PermissionDenied);
    expect(codeOf(() => refuseForeignCredentials({ certificatePresented: false, adminToken: "k" }))).toBe(Code.PermissionDenied);
    expect(codeOf(() => refuseForeignCredentials({ certificatePresented: false, adminToken: null }))).toBeUndefined();
  });
  it.each([
    [{ revokedAt: null, expiresAt: null }, "active"],
    [{ revokedAt: new Date(1), expiresAt: null }, "revoked"],
    [{ revokedAt: null, expiresAt: new Date(1000) }, "expired"],
    [{ revokedAt: null, expiresAt: new Date(3000) }, "active"],
  ])("state %o at 2000", (k, want) => expect(serviceKeyState(k, 2000)).toBe(want));
  it("checks a new key's name and scope", () => {
    expect(codeOf(() => checkServiceKeyInput("ok-name", ["tiny"]))).toBeUndefined();
    expect(codeOf(() => checkServiceKeyInput("Bad Name", ["tiny"]))).toBe(Code.InvalidArgument);
    expect(codeOf(() => checkServiceKeyInput("ok", []))).toBe(Code.InvalidArgument);
    expect(codeOf(() => checkServiceKeyInput("ok", [" tiny"]))).toBe(Code.InvalidArgument);
  });
});

describe("agent rules", () => {
  it("cleans a log line and cuts it on a character boundary", () => {
    expect(cleanLine("a\tb\rc\u0000d", 100)).toBe("a\tbcd");
    expect(cleanLine("é".repeat(10), 5)).toBe("éé");
  });
  it("forwards log lines at a bounded rate and counts what it drops", () => {
    const limits = { ...defaultLogLimits, linesPerSecond: 10, pendingLines: 15 };
    const box = new WatchOutbox(limits, 0);
    box.add(Array.from({ length: 20 }, () => ({}) as never));
    expect(box.take(0)).toMatchObject({ dropped: 5n });
    expect(box.take(0)).toBeUndefined();
    expect(box.take(500)?.lines).toHaveLength(5);
  });
  it("queues requests behind a gate of one, and a waiter that gives up leaves the queue", async () => {
    const gate = new Gate(1);
    const first = await gate.acquire(new AbortController().signal);
    const giveUp = new AbortController();
    const second = gate.acquire(giveUp.signal);
    const third = gate.acquire(new AbortController().signal);
    // What the agent's heartbeat reports as queued at the runtime.
    expect(gate.queued).toBe(2);
    giveUp.abort(new Error("gone"));
    await expect(second).rejects.toThrow("gone");
    expect(gate.queued).toBe(1);
    first();
    (await third)();
    expect(gate.queued).toBe(0);
  });
  it.each([
    [new OpenAiClientError(400, "invalid_request_error", undefined, "x"), "invalid_argument"],
    [new OpenAiClientError(503, undefined, undefined, "x"), "resource_exhausted"],
    [new OpenAiClientError(500, undefined, undefined, "x"), "internal"],
    [new OpenAiClientError(404, "not_found_error", "model_not_found", "x"), "invalid_argument"],
    [new OpenAiClientError(422, undefined, undefined, "x"), "invalid_argument"],
    [new OpenAiClientError(413, undefined, undefined, "x"), "invalid_argument"],
    [new OpenAiClientError(429, undefined, undefined, "x"), "resource_exhausted"],
    [new OpenAiClientError(401, undefined, undefined, "x"), "internal"],
    [new RangeError("Maximum call stack size exceeded"), "internal"],
    [Object.assign(new Error("t"), { name: "TimeoutError" }), "deadline_exceeded"],
    [Object.assign(new Error("connect ECONNREFUSED 127.0.0.1:1"), { code: "ECONNREFUSED" }), "unavailable"],
    [Object.assign(new Error("read ECONNRESET"), { code: "ECONNRESET" }), "internal"],
  ])("runtime refusal %s -> %s", (err, code) => expect(refusalCode(err)).toBe(code));
  it.each([
    ["short", "the model said no", "the model said no"],
    ["control characters", "a\u0000b\nc\u0085d", "a b c d"],
    ["an unpaired surrogate", "a\ud800b", "a\ufffdb"],
    ["long", "x".repeat(1000), `${"x".repeat(253)}...`],
    ["cut inside a character", "é".repeat(200), `${"é".repeat(126)}...`],
  ])("a runtime's message, %s, fits the contract", (_what, raw, want) => {
    const fitted = fitMessage(raw);
    expect(fitted).toBe(want);
    expect(Buffer.byteLength(fitted)).toBeLessThanOrEqual(256);
  });
});

/** A node session that records what the relay pushed. */
class FakeSession implements LiveSession {
  readonly sent: SessionResponse[] = [];
  constructor(readonly nodeId: string) {}
  readonly serial = "s";
  readonly embeddingEngines = ["llama.cpp"];
  /** What the node's heartbeat reported queued, by "deployment/revision/replica". */
  readonly queued = new Map<string, number>();
  queuedAt(deploymentId: string, revision: bigint, replica: number) {
    return this.queued.get(`${deploymentId}/${revision}/${replica}`) ?? 0;
  }
  send(m: SessionResponse) {
    this.sent.push(m);
    return true;
  }
  /** As the gRPC Session sends it: encoded by hand, and read back here by protobuf-es. */
  sendInvoke(start: InvokePush) {
    return this.send(fromBinary(SessionResponseSchema, invokeStartBytes(start)));
  }
  close() {}
}

/** A forwarder that records what it was asked and answers from the holders it was given. */
class FakeForwarder implements InvokeForwarder {
  readonly lookups: string[][] = [];
  readonly forwarded: { holder: SessionHolder; call: InvokeCall }[] = [];
  constructor(private readonly holders: Record<string, SessionHolder>) {}
  async holderOf(nodeIds: readonly string[]) {
    this.lookups.push([...nodeIds]);
    return nodeIds.map((id) => this.holders[id]).find((h) => h !== undefined);
  }
  async *forward(holder: SessionHolder, call: InvokeCall) {
    this.forwarded.push({ holder, call });
    yield { payload: Buffer.from(`from ${holder.replicaId}`), contentType: "application/json", revision: 2n, replica: 0 };
  }
  close() {}
}

function setup(t: DeploymentTarget | undefined, forwarder?: InvokeForwarder, maxUnreadBytes?: number) {
  const clock = new ManualClock(0);
  const sessions = new SessionRegistry();
  const node = new FakeSession("n1");
  sessions.attach(node);
  let current = t;
  let finds = 0;
  const listeners = new Set<(id: string) => void>();
  const routes: DeploymentRoutes = {
    find: async () => {
      finds++;
      return current;
    },
    list: async () => (current ? [current] : []),
    onChange: (l) => {
      listeners.add(l);
      return () => listeners.delete(l);
    },
  };
  const counts = new InvokeCounts();
  const relay = new InvokeRelay({
    sessions,
    routes,
    clock,
    log: pino({ level: "silent" }),
    counts,
    logs: new LogWatches(sessions),
    forwarder,
    drain: new Drain(),
    ...(maxUnreadBytes !== undefined ? { maxUnreadBytes } : {}),
  });
  const principal = { keyId: "k", deployments: new Set(["tiny"]), limits: noLimits };
  const call = (over: Partial<InvokeCall> = {}): InvokeCall => ({
    deployment: "tiny",
    contentType: "application/json",
    payload: Buffer.from('{"prompt":"x"}'),
    timeoutMs: undefined,
    api: InvokeApi.UNSPECIFIED,
    stream: false,
    requestId: "r",
    signal: new AbortController().signal,
    ...over,
  });
  const answer = (invokeId: bigint, value: object) =>
    relay.fromAgent(node, create(SessionRequestSchema, { message: { case: "invokeAnswer", value: { invokeId, ...value } } }));
  const lastInvokeId = () => {
    const m = [...node.sent].reverse().find((s) => s.message.case === "invoke")!.message;
    return m.case === "invoke" ? m.value.invokeId : -1n;
  };
  const collect = async (it: AsyncGenerator<{ payload: Uint8Array }>) => {
    const out: string[] = [];
    for await (const p of it) out.push(Buffer.from(p.payload).toString());
    return out;
  };
  return {
    clock,
    node,
    relay,
    principal,
    call,
    answer,
    lastInvokeId,
    collect,
    counts,
    finds: () => finds,
    set: (t2: DeploymentTarget | undefined) => (current = t2),
    change: (id: string) => {
      for (const l of listeners) l(id);
    },
  };
}

describe("the relay over a fake node session", () => {
  const tick = () => new Promise((r) => setImmediate(r));

  it("sends a request to the replica slot with the shorter queue its node reported, naming the slot", async () => {
    const pair = target({
      ready: [
        { revision: 2n, replica: 0, nodeId: "n1", phase: "READY", engine: "llama.cpp", embeddings: false, runtimeId: "" },
        { revision: 2n, replica: 1, nodeId: "n1", phase: "READY", engine: "llama.cpp", embeddings: false, runtimeId: "" },
      ],
    });
    const s = setup(pair);
    const sentReplica = () => {
      const m = [...s.node.sent].reverse().find((x) => x.message.case === "invoke")!.message;
      return m.case === "invoke" ? m.value.invoke?.replica : undefined;
    };
    for (const [busy, want] of [
      [0, 1],
      [1, 0],
    ] as const) {
      s.node.queued.clear();
      s.node.queued.set(`d1/2/${busy}`, 3);
      const answered = s.collect(s.relay.invoke(s.principal, s.call()));
      await tick();
      expect(sentReplica()).toBe(want);
      s.answer(s.lastInvokeId(), { payload: Buffer.from("ok"), done: true, revision: 2n });
      await answered;
    }
  });

  it("relays a request and its answer; streams chunk by chunk", async () => {
    const s = setup(target());
    const unary = s.collect(s.relay.invoke(s.principal, s.call()));
    await tick();
    s.answer(s.lastInvokeId(), { payload: Buffer.from("whole"), done: true, revision: 2n });
    expect(await unary).toEqual(["whole"]);
    const stream = s.collect(s.relay.invoke(s.principal, s.call({ stream: true })));
    await tick();
    const id = s.lastInvokeId();
    s.answer(id, { payload: Buffer.from("a") });
    s.answer(id, { payload: Buffer.from("b") });
    s.answer(id, { done: true });
    expect(await stream).toEqual(["a", "b"]);
    expect(s.counts.take().get("d1")?.get("ok")).toBe(2);
  });

  it("refuses beyond the in-flight bound with resource_exhausted", async () => {
    const s = setup(target({ maxInFlight: 1 }));
    const first = s.collect(s.relay.invoke(s.principal, s.call()));
    await tick();
    await expect(s.collect(s.relay.invoke(s.principal, s.call()))).rejects.toMatchObject({ code: Code.ResourceExhausted });
    s.answer(s.lastInvokeId(), { payload: Buffer.from("x"), done: true });
    await first;
    expect(s.relay.inFlightOf("d1", 2n, 0)).toBe(0);
  });

  it("a node's typed error reaches the caller; a deadline cancels on the node", async () => {
    const s = setup(target());
    const refused = s.collect(s.relay.invoke(s.principal, s.call()));
    await tick();
    s.answer(s.lastInvokeId(), { done: true, error: { code: "unavailable", message: "draining" } });
    await expect(refused).rejects.toMatchObject({ code: Code.Unavailable });
    const slow = s.collect(s.relay.invoke(s.principal, s.call({ timeoutMs: 1_000 })));
    await tick();
    const refusedLate = expect(slow).rejects.toMatchObject({ code: Code.DeadlineExceeded });
    // The deadline's sleep is no loop: it does not sleep again, so advance rather than tick.
    s.clock.advance(1_000);
    await refusedLate;
    expect(s.node.sent.at(-1)?.message.case).toBe("invokeCancel");
  });

  it("the caller going away cancels on the node", async () => {
    const s = setup(target());
    const gone = new AbortController();
    const call = s.collect(s.relay.invoke(s.principal, s.call({ signal: gone.signal })));
    await tick();
    gone.abort();
    await expect(call).rejects.toMatchObject({ code: Code.Canceled });
    expect(s.node.sent.at(-1)?.message.case).toBe("invokeCancel");
  });

  it("the node's session ending fails its requests unavailable; another session cannot answer", async () => {
    const s = setup(target());
    const call = s.collect(s.relay.invoke(s.principal, s.call()));
    await tick();
    s.relay.fromAgent(
      new FakeSession("n1"),
      create(SessionRequestSchema, { message: { case: "invokeAnswer", value: { invokeId: s.lastInvokeId(), done: true } } }),
    );
    s.relay.sessionClosed(s.node);
    await expect(call).rejects.toMatchObject({ code: Code.Unavailable });
  });

  it("a caller that stops reading holds no slot: past the unread bound its request ends and its stream is ended", async () => {
    const s = setup(target({ maxInFlight: 1 }), undefined, 10);
    const abandoned: string[] = [];
    const pieces = s.relay.invoke(s.principal, s.call({ stream: true, abandon: (why) => abandoned.push(why) }));
    // The caller takes the first piece, then reads no more (its transport is blocked on the client).
    const first = pieces.next();
    await tick();
    const id = s.lastInvokeId();
    for (let i = 0; i < 3; i++) s.answer(id, { payload: Buffer.from("aaaa") });
    expect(Buffer.from((await first).value!.payload).toString()).toBe("aaaa");
    expect(abandoned).toEqual([]);
    // 8 bytes unread; 4 more would pass the bound of 10.
    s.answer(id, { payload: Buffer.from("aaaa") });
    await tick();
    expect(abandoned).toEqual(["stalled"]);
    expect(s.node.sent.at(-1)?.message.case).toBe("invokeCancel");
    expect(s.relay.inFlightOf("d1", 2n, 0)).toBe(0);
    expect(s.counts.take().get("d1")?.get("client_stalled")).toBe(1);
    // What was held for it is dropped; if it reads again it learns why.
    await expect(pieces.next()).rejects.toMatchObject({ code: Code.ResourceExhausted });
    // The slot is free for the next caller at once.
    const next = s.collect(s.relay.invoke(s.principal, s.call()));
    await tick();
    s.answer(s.lastInvokeId(), { payload: Buffer.from("served"), done: true });
    expect(await next).toEqual(["served"]);
  });

  it("a whole answer left unread ends the caller's stream at the deadline, not before; one read to its end never", async () => {
    const s = setup(target());
    const abandoned: string[] = [];
    const pieces = s.relay.invoke(s.principal, s.call({ stream: true, timeoutMs: 5_000, abandon: (why) => abandoned.push(why) }));
    const first = pieces.next();
    await tick();
    const id = s.lastInvokeId();
    s.answer(id, { payload: Buffer.from("a") });
    s.answer(id, { payload: Buffer.from("b") });
    s.answer(id, { done: true });
    await first;
    await tick();
    // The node is done: the request's slot is free and it counts as answered, though "b" is unread.
    expect(s.relay.inFlightOf("d1", 2n, 0)).toBe(0);
    expect(s.counts.take().get("d1")?.get("ok")).toBe(1);
    s.clock.advance(4_999);
    expect(abandoned).toEqual([]);
    s.clock.advance(1);
    expect(abandoned).toEqual(["deadline"]);

    const read: string[] = [];
    const whole = s.collect(s.relay.invoke(s.principal, s.call({ stream: true, timeoutMs: 5_000, abandon: (why) => read.push(why) })));
    await tick();
    s.answer(s.lastInvokeId(), { payload: Buffer.from("c"), done: true });
    expect(await whole).toEqual(["c"]);
    s.clock.advance(10_000);
    expect(read).toEqual([]);
  });

  it("caches routing briefly, and a routing change drops it at once", async () => {
    const s = setup(target());
    const one = async () => {
      const c = s.collect(s.relay.invoke(s.principal, s.call()));
      await tick();
      s.answer(s.lastInvokeId(), { payload: Buffer.from("x"), done: true });
      return c;
    };
    await one();
    await one();
    expect(s.finds()).toBe(1);
    s.set(target({ phase: "DRAINING", ready: [] }));
    s.change("d1");
    await expect(s.collect(s.relay.invoke(s.principal, s.call()))).rejects.toMatchObject({ code: Code.Unavailable });
    expect(s.finds()).toBe(2);
  });

  it("forwards to the replica holding the node's session, once; none holding it is unavailable", async () => {
    const elsewhere = target({
      ready: [{ revision: 2n, replica: 0, nodeId: "n9", phase: "READY", engine: "llama.cpp", embeddings: false, runtimeId: "" }],
    });
    const holder = { nodeId: "n9", replicaId: "r-a", url: "https://a.internal:8443" };
    const forwarder = new FakeForwarder({ n9: holder });
    const s = setup(elsewhere, forwarder);
    const call = s.call({ credential: "Bearer mfsk_x", stream: true });
    expect(await s.collect(s.relay.invoke(s.principal, call))).toEqual(["from r-a"]);
    expect(forwarder.lookups).toEqual([["n9"]]);
    // The caller's call, with the request's own signal (it also ends when the caller stops reading).
    expect(forwarder.forwarded).toEqual([{ holder, call: { ...call, signal: expect.any(AbortSignal) } }]);
    expect(s.node.sent).toEqual([]); // nothing went down this replica's session
    // A call another replica forwarded here is never forwarded on.
    await expect(s.collect(s.relay.invoke(s.principal, s.call({ forwardedFrom: "r-b" })))).rejects.toMatchObject({
      code: Code.Unavailable,
      rawMessage: expect.stringContaining("expected its session here"),
    });
    expect(forwarder.forwarded).toHaveLength(1);
    // No replica holds it; and without a forwarder (the embedded database) nothing is tried.
    const nobody = setup(elsewhere, new FakeForwarder({}));
    await expect(nobody.collect(nobody.relay.invoke(nobody.principal, nobody.call()))).rejects.toMatchObject({
      code: Code.Unavailable,
      rawMessage: expect.stringContaining("no replica holds its session"),
    });
    const single = setup(elsewhere);
    await expect(single.collect(single.relay.invoke(single.principal, single.call()))).rejects.toMatchObject({
      code: Code.Unavailable,
      rawMessage: "the node serving deployment tiny is not reachable: its node is not connected",
    });
  });

  it("a local session is preferred over forwarding", async () => {
    const forwarder = new FakeForwarder({ n1: { nodeId: "n1", replicaId: "r-a", url: "https://a.internal:8443" } });
    const s = setup(target(), forwarder);
    const local = s.collect(s.relay.invoke(s.principal, s.call()));
    await tick();
    s.answer(s.lastInvokeId(), { payload: Buffer.from("here"), done: true });
    expect(await local).toEqual(["here"]);
    expect(forwarder.lookups).toEqual([]);
  });
});
