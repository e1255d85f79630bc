// Session-open admission: a bounded number at a time, in arrival order, refusing beyond the queue
// with a retry hint from the rate opens finish at; the hint reaches an agent through the real
// server's gRPC Session.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { Code, ConnectError } from "@connectrpc/connect";
import { Admission, drainSeconds } from "../../server/sessions/admission.js";
import { startTestServer, type TestServer } from "../support/server.js";
import { enrollTestNode } from "../support/node.js";

/** A task that finishes when told to, recording when it started. */
function gate(started: string[], name: string) {
  let open!: () => void;
  let fail!: (err: Error) => void;
  const done = new Promise<string>((resolve, reject) => {
    open = () => resolve(name);
    fail = reject;
  });
  return {
    task: () => {
      started.push(name);
      return done;
    },
    open,
    fail,
  };
}
const settle = () => new Promise((r) => setImmediate(r));

describe("Admission", () => {
  it("runs at most `limit` tasks at a time, the rest in arrival order as slots free", async () => {
    const admission = new Admission(2, 10);
    const started: string[] = [];
    const gates = ["a", "b", "c", "d"].map((n) => gate(started, n));
    const results = gates.map((g) => admission.run(g.task));
    for (const r of results) r.catch(() => undefined); // judged below, all together
    await settle();
    expect(started).toEqual(["a", "b"]);
    expect([admission.running, admission.queued]).toEqual([2, 2]);
    gates[1]!.open();
    await settle();
    expect(started).toEqual(["a", "b", "c"]);
    gates[0]!.fail(new Error("database gone")); // a failed task frees its slot too
    await settle();
    expect(started).toEqual(["a", "b", "c", "d"]);
    gates[2]!.open();
    gates[3]!.open();
    expect(await Promise.allSettled(results)).toMatchObject([
      { status: "rejected" },
      { status: "fulfilled", value: "b" },
      { status: "fulfilled", value: "c" },
      { status: "fulfilled", value: "d" },
    ]);
    expect([admission.running, admission.queued]).toEqual([0, 0]);
  });

  it("refuses with unavailable once the queue is full, and admits again when it drains", async () => {
    const admission = new Admission(1, 1);
    const started: string[] = [];
    const first = gate(started, "first");
    const second = gate(started, "second");
    const running = admission.run(first.task);
    const queued = admission.run(second.task);
    const refused = await admission
      .run(async () => "third")
      .then(
        () => undefined,
        (e: unknown) => e,
      );
    expect(refused).toBeInstanceOf(ConnectError);
    expect((refused as ConnectError).code).toBe(Code.Unavailable);
    first.open();
    second.open();
    expect(await Promise.all([running, queued])).toEqual(["first", "second"]);
    expect(await admission.run(async () => "later")).toBe("later");
  });
});

describe("drainSeconds", () => {
  const now = 100_000;
  // Ten finished over the last 900 ms: 10 per second.
  const tenPerSecond = Array.from({ length: 10 }, (_, i) => now - 900 + i * 100);
  const cases: { name: string; waiting: number; finished: number[]; want: number }[] = [
    { name: "nothing finished yet: come back soon", waiting: 2_000, finished: [], want: 1 },
    { name: "one finished says no rate", waiting: 2_000, finished: [now - 10], want: 1 },
    { name: "the queue at the measured rate", waiting: 45, finished: tenPerSecond, want: 5 },
    { name: "rounded up", waiting: 41, finished: tenPerSecond, want: 5 },
    { name: "at least a second", waiting: 1, finished: tenPerSecond, want: 1 },
    { name: "at most the Welcome deadline", waiting: 2_000, finished: tenPerSecond, want: 30 },
    { name: "completions older than 5 s are not the rate now", waiting: 45, finished: tenPerSecond.map((t) => t - 6_000), want: 1 },
    { name: "in any order", waiting: 45, finished: [...tenPerSecond].reverse(), want: 5 },
  ];
  it.each(cases)("$name", ({ waiting, finished, want }) => {
    expect(drainSeconds(waiting, finished, now)).toBe(want);
  });
});

describe("the refusal's retry hint", () => {
  it("tells how long the queue ahead takes at the rate opens finished", async () => {
    let now = 0;
    const admission = new Admission(1, 8, () => now);
    for (let i = 0; i < 5; i++) {
      now += 250; // four a second
      await admission.run(async () => undefined);
    }
    const started: string[] = [];
    const gates = Array.from({ length: 9 }, (_, i) => gate(started, `open ${i}`));
    const admitted = gates.map((g) => admission.run(g.task)); // one running, eight waiting
    await settle();
    expect([admission.running, admission.queued]).toEqual([1, 8]);
    const refused = await admission
      .run(async () => "late")
      .then(
        () => undefined,
        (e: unknown) => e as ConnectError,
      );
    expect(refused?.code).toBe(Code.Unavailable);
    expect(refused?.rawMessage).toBe("control plane busy: too many sessions opening at once; retry in 2 s");
    expect(refused?.metadata.get("retry-after")).toBe("2");
    for (const g of gates) g.open();
    await Promise.all(admitted);
  });
});

describe("a busy control plane's Session refusal", () => {
  let ts: TestServer;
  beforeAll(async () => {
    // No slot and no queue: every open is refused, as when 2,000 are already waiting.
    ts = await startTestServer({}, { sessionOpens: { concurrent: 0, queued: 0 } });
  });
  afterAll(async () => ts?.stop());

  it("carries retry-after to the agent's gRPC client", async () => {
    const client = await (await enrollTestNode(ts, "busy")).client();
    const outbound = (async function* () {
      yield { messageId: 1n, message: { case: "hello" as const, value: { protocolVersion: 1, agentVersion: "test" } } };
      await new Promise(() => undefined);
    })();
    const end = await client
      .session(outbound)
      [Symbol.asyncIterator]()
      .next()
      .then(
        () => undefined,
        (e: unknown) => e,
      );
    expect(end).toBeInstanceOf(ConnectError);
    expect((end as ConnectError).code).toBe(Code.Unavailable);
    expect((end as ConnectError).rawMessage).toMatch(/^control plane busy: .*; retry in 1 s$/);
    expect((end as ConnectError).metadata.get("retry-after")).toBe("1");
  });
});
