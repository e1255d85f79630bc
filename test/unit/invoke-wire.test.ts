// The invoke relay's wire fast paths (server/sessions/invoke-wire.ts) against protobuf-es and the
// edge check: an answer is read only from bytes the general path decodes to the same message and
// passes, and an InvokeStart is written as the very bytes protobuf-es writes.
import { describe, expect, it } from "vitest";
import { create, fromBinary, toBinary } from "@bufbuild/protobuf";
import { SessionRequestSchema, SessionResponseSchema, type SessionRequest } from "../../gen/proto/modelforge/agent/v1/agent_pb.js";
import { invokeStartBytes, invokeStartMessage, plainInvokeAnswer } from "../../server/sessions/invoke-wire.js";
import { sessionMessageViolation } from "../../server/edge/validate.js";
import { invokePush, invokePushCases } from "../support/invoke-push.js";
import { mulberry32 } from "../../common/random.js";
import { mutated } from "../support/mutate.js";

const chunk = Buffer.from('{"id":"cmpl-1","object":"text_completion","choices":[{"index":0,"text":" fox"}],"usage":null}');

function answer(
  messageId: bigint,
  fields: { invokeId?: bigint; contentType?: string; payload?: Uint8Array; done?: boolean; revision?: bigint },
): SessionRequest {
  return create(SessionRequestSchema, { messageId, message: { case: "invokeAnswer", value: fields } });
}

/** The general path: decoded by protobuf-es and passed by the edge check, as an answer without error. */
function general(bytes: Uint8Array): SessionRequest | undefined {
  let m: SessionRequest;
  try {
    m = fromBinary(SessionRequestSchema, bytes, { readUnknownFields: false });
  } catch {
    return undefined;
  }
  if (m.message.case !== "invokeAnswer" || m.message.value.error !== undefined) return undefined;
  return sessionMessageViolation(SessionRequestSchema, m) === undefined ? m : undefined;
}

/** The two messages alike: the payloads compared as bytes (a deep compare of megabytes takes seconds), the rest field by field. */
function expectSame(fast: SessionRequest | undefined, expected: SessionRequest | undefined, what = ""): void {
  expect(fast, what).toBeDefined();
  expect(expected, what).toBeDefined();
  const [a, b] = [fast!, expected!].map((m) => (m.message.case === "invokeAnswer" ? m.message.value : undefined));
  expect(Buffer.from(a!.payload).equals(Buffer.from(b!.payload)), what).toBe(true);
  expect({ ...fast!, message: { ...fast!.message, value: { ...a!, payload: null } } }, what).toEqual({
    ...expected!,
    message: { ...expected!.message, value: { ...b!, payload: null } },
  });
}

const plainAnswers: [string, SessionRequest][] = [
  ["a stream chunk", answer(0n, { invokeId: 1n, contentType: "application/json", payload: chunk, revision: 1n })],
  ["the last, empty piece", answer(0n, { invokeId: 300n, done: true, revision: 2n })],
  ["a whole answer", answer(0n, { invokeId: 2n ** 32n, contentType: "application/json", payload: chunk, done: true, revision: 16_384n })],
  ["one asking for a reply", answer(7n, { invokeId: 1n, payload: chunk })],
  ["nothing set", answer(0n, {})],
  ["the largest ids read here", answer(2n ** 49n - 1n, { invokeId: 2n ** 49n - 1n, revision: 2n ** 49n - 1n })],
  ["a content type of 128 bytes", answer(0n, { invokeId: 1n, contentType: "a".repeat(128) })],
  ["a payload of 200 KiB", answer(0n, { invokeId: 1n, payload: Buffer.alloc(200 * 1024, 0x61) })],
  ["a payload at the bound", answer(0n, { invokeId: 1n, payload: Buffer.alloc(4 * 1024 * 1024, 0x20) })],
];

describe("reading an invoke answer off the wire", () => {
  it.each(plainAnswers)("reads %s as protobuf-es does", (_, message) => {
    const bytes = toBinary(SessionRequestSchema, message);
    expectSame(plainInvokeAnswer(bytes), general(bytes));
  });

  it.each<[string, SessionRequest]>([
    [
      "an error",
      create(SessionRequestSchema, { message: { case: "invokeAnswer", value: { invokeId: 1n, done: true, error: { code: "internal" } } } }),
    ],
    ["a content type over 128 bytes", answer(0n, { invokeId: 1n, contentType: "a".repeat(129) })],
    ["a content type beyond ASCII", answer(0n, { invokeId: 1n, contentType: "application/jsön" })],
    ["a control character in the content type", answer(0n, { invokeId: 1n, contentType: "application/json\n" })],
    ["a payload over the bound", answer(0n, { invokeId: 1n, payload: Buffer.alloc(4 * 1024 * 1024 + 1) })],
    ["an invoke id beyond 2^49", answer(0n, { invokeId: 2n ** 49n })],
    ["a revision beyond what is stored", answer(0n, { invokeId: 1n, revision: 2n ** 63n })],
    ["a message id beyond 2^49", answer(2n ** 50n, { invokeId: 1n })],
    ["another message", create(SessionRequestSchema, { messageId: 1n, message: { case: "heartbeat", value: {} } })],
    ["log lines", create(SessionRequestSchema, { message: { case: "logLines", value: { watchId: 1n } } })],
    ["no message", create(SessionRequestSchema, { messageId: 1n })],
  ])("leaves %s to the general path", (_, message) => {
    expect(plainInvokeAnswer(toBinary(SessionRequestSchema, message))).toBeUndefined();
  });

  it("leaves duplicated, unknown, odd and cut-short fields to the general path", () => {
    const plain = toBinary(SessionRequestSchema, answer(0n, { invokeId: 5n, payload: chunk }));
    expect(plainInvokeAnswer(plain)).toBeDefined();
    const inner = toBinary(SessionRequestSchema, answer(0n, { invokeId: 5n })).subarray(2);
    const wrap = (body: number[]) => Uint8Array.from([0x4a, body.length, ...body]);
    expect(plainInvokeAnswer(wrap([...inner]))).toBeDefined();
    expect(plainInvokeAnswer(wrap([...inner, 0x08, 0x06]))).toBeUndefined(); // invoke_id twice
    expect(plainInvokeAnswer(wrap([...inner, 0x38, 0x01]))).toBeUndefined(); // unknown field 7
    expect(plainInvokeAnswer(wrap([...inner, 0x20, 0x02]))).toBeUndefined(); // done as 2: true to protobuf, odd here
    expect(plainInvokeAnswer(Uint8Array.from([...plain, 0x4a, 0x00]))).toBeUndefined(); // invoke_answer twice
    expect(plainInvokeAnswer(plain.subarray(0, plain.length - 1))).toBeUndefined();
    expect(plainInvokeAnswer(new Uint8Array(0))).toBeUndefined();
  });

  it("never reads an answer from bytes the general path would not take as that same answer", () => {
    const next = mulberry32(11);
    let read = 0;
    for (let i = 0; i < 20_000; i++) {
      const bytes = toBinary(
        SessionRequestSchema,
        answer(next() < 0.5 ? 0n : BigInt(Math.floor(next() * 1e6)), {
          invokeId: BigInt(Math.floor(next() * 1e9)),
          contentType: "application/json",
          payload: chunk.subarray(0, Math.floor(next() * chunk.length)),
          done: next() < 0.3,
          revision: BigInt(Math.floor(next() * 100)),
        }),
      );
      const input = mutated(bytes, next);
      const fast = plainInvokeAnswer(input);
      if (fast === undefined) continue;
      read++;
      expectSame(fast, general(input), `bytes ${Buffer.from(input).toString("hex")}`);
    }
    // The mutations leave many answers plain (a byte of the payload or an id changed).
    expect(read).toBeGreaterThan(1_000);
  });
});

describe("writing an InvokeStart", () => {
  it.each(invokePushCases)("writes %s as protobuf-es does", (_, over) => {
    const push = { ...invokePush, ...over };
    const expected = toBinary(SessionResponseSchema, invokeStartMessage(push));
    expect(Buffer.from(invokeStartBytes(push)).equals(Buffer.from(expected))).toBe(true);
  });
});
