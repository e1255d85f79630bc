// Session-open admission: a bounded number at a time, in arrival order, refusing beyond the queue.
import { describe, expect, it } from "vitest";
import { Code, ConnectError } from "@connectrpc/connect";
import { Admission } from "../server/sessions/admission.js";

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
