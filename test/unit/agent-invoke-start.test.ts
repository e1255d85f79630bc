// The agent's reader of an InvokeStart off the wire (agent/deployments/invoke-start.ts) is held to
// protobuf-es: what it reads is what fromBinary reads, for what the server writes and for seeded
// damage to it; any other shape is left to fromBinary.
import { describe, expect, it } from "vitest";
import { create, fromBinary, toBinary } from "@bufbuild/protobuf";
import { SessionResponseSchema, type SessionResponse } from "../../gen/proto/modelforge/agent/v1/agent_pb.js";
import { InvokeApi } from "../../gen/proto/modelforge/deployment/v1/deployment_pb.js";
import { invokePush, invokePushCases } from "../support/invoke-push.js";
import { invokeStartBytes } from "../../server/sessions/invoke-wire.js";
import { plainInvokeStart } from "../../agent/deployments/invoke-start.js";
import { mulberry32 } from "../../common/random.js";
import { mutated } from "../support/mutate.js";

/** Equal to fromBinary's message; the payload compared as bytes (toEqual walks a large one slowly). */
function expectSame(fast: SessionResponse, bytes: Uint8Array, what = ""): void {
  const general = fromBinary(SessionResponseSchema, bytes);
  const payloadOf = (m: SessionResponse) => (m.message.case === "invoke" ? m.message.value.invoke?.payload : undefined);
  const [a, b] = [payloadOf(fast), payloadOf(general)];
  expect(a === undefined ? undefined : Buffer.from(a).equals(Buffer.from(b ?? []))).toBe(a === undefined ? undefined : true);
  const strip = (m: SessionResponse) =>
    m.message.case === "invoke" && m.message.value.invoke !== undefined
      ? {
          ...m,
          message: { ...m.message, value: { ...m.message.value, invoke: { ...m.message.value.invoke, payload: new Uint8Array(0) } } },
        }
      : m;
  expect(strip(fast), what).toEqual(strip(general));
}

describe("reading an InvokeStart off the wire", () => {
  /** Cases the server writes that this reader leaves to protobuf-es. */
  const leftToGeneral = new Set(["an invoke id past 2^53", "a request id beyond ASCII"]);

  it.each(invokePushCases)("reads %s as protobuf-es does", (name, over) => {
    const bytes = invokeStartBytes({ ...invokePush, ...over });
    const fast = plainInvokeStart(bytes);
    if (leftToGeneral.has(name)) return expect(fast).toBeUndefined();
    expect(fast).toBeDefined();
    expectSame(fast!, bytes);
  });

  it("reads the largest invoke id it takes, and leaves the next to protobuf-es", () => {
    const largest = invokeStartBytes({ ...invokePush, invokeId: 2n ** 49n - 1n });
    expectSame(plainInvokeStart(largest)!, largest);
    expect(plainInvokeStart(invokeStartBytes({ ...invokePush, invokeId: 2n ** 49n }))).toBeUndefined();
  });

  it("reads a start without its invoke, and an empty InvokeStart, as protobuf-es does", () => {
    for (const value of [{ invokeId: 5n, api: InvokeApi.COMPLETIONS }, {}]) {
      const bytes = toBinary(SessionResponseSchema, create(SessionResponseSchema, { message: { case: "invoke", value } }));
      const fast = plainInvokeStart(bytes);
      expect(fast).toBeDefined();
      expectSame(fast!, bytes);
    }
  });

  const leftOver: [string, Uint8Array][] = [
    ["a revision past 2^49", invokeStartBytes({ ...invokePush, revision: 2n ** 60n })],
    [
      "another message (a cancel)",
      toBinary(SessionResponseSchema, create(SessionResponseSchema, { message: { case: "invokeCancel", value: { invokeId: 1n } } })),
    ],
    ["a welcome", toBinary(SessionResponseSchema, create(SessionResponseSchema, { message: { case: "welcome", value: { nodeId: "n" } } }))],
    ["nothing", new Uint8Array(0)],
    // InvokeStart { stream = 4, then invoke_id = 1 }: legal protobuf, out of number order.
    ["fields out of order", Uint8Array.from([0x3a, 0x04, 0x20, 0x01, 0x08, 0x05])],
    ["a field twice", Uint8Array.from([0x3a, 0x04, 0x08, 0x05, 0x08, 0x06])],
    ["an unknown field", Uint8Array.from([0x3a, 0x04, 0x08, 0x05, 0x48, 0x01])],
    ["a stream flag of 2", Uint8Array.from([0x3a, 0x02, 0x20, 0x02])],
    ["a negative api", Uint8Array.from([0x3a, 0x0b, 0x18, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01])],
    ["bytes after the InvokeStart", Uint8Array.from([0x3a, 0x02, 0x08, 0x05, 0x08, 0x01])],
    ["an InvokeStart cut short", Uint8Array.from([0x3a, 0x05, 0x08, 0x05])],
  ];
  it.each(leftOver)("leaves %s to protobuf-es", (_, bytes) => {
    expect(plainInvokeStart(bytes)).toBeUndefined();
  });

  it("never reads an InvokeStart from bytes protobuf-es would not read as that same message", () => {
    const next = mulberry32(17);
    let read = 0;
    for (let i = 0; i < 20_000; i++) {
      const bytes = invokeStartBytes({
        ...invokePush,
        invokeId: BigInt(Math.floor(next() * 1e9)),
        payload: invokePush.payload.subarray(0, Math.floor(next() * invokePush.payload.length)),
        timeoutMs: 1 + Math.floor(next() * 100_000),
        revision: BigInt(Math.floor(next() * 100)),
        replica: Math.floor(next() * 4),
        stream: next() < 0.5,
      });
      const input = mutated(bytes, next);
      const fast = plainInvokeStart(input);
      if (fast === undefined) continue;
      read++;
      expectSame(fast, input, `bytes ${Buffer.from(input).toString("hex")}`);
    }
    // The mutations leave many starts plain (a byte of the payload or a name changed).
    expect(read).toBeGreaterThan(1_000);
  });
});
