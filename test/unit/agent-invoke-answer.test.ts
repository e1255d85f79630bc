// The agent's invoke answer, built as a message literal (agent/deployments/invoke-answer.ts), is
// the message create() builds, and encodes to the same bytes; framed by hand, to the bytes
// protobuf-es writes in a gRPC frame, and only for the shape it knows.
import { describe, expect, it } from "vitest";
import { create, toBinary } from "@bufbuild/protobuf";
import { SessionRequestSchema } from "../../gen/proto/modelforge/agent/v1/agent_pb.js";
import { framedAnswer, invokeAnswerRequest, type AnswerPiece } from "../../agent/deployments/invoke-answer.js";
import { frame } from "../../common/grpc-frames.js";

const pieces: [string, AnswerPiece][] = [
  ["a stream chunk", { invokeId: 7n, contentType: "application/json", payload: Buffer.from('{"choices":[]}'), done: false, revision: 3n }],
  ["the last, empty piece", { invokeId: 7n, contentType: "application/json", payload: new Uint8Array(0), done: true, revision: 3n }],
  ["zero ids and no content type", { invokeId: 0n, contentType: "", payload: Buffer.from("{}"), done: false, revision: 0n }],
  [
    "large ids",
    { invokeId: 2n ** 63n, contentType: "application/json", payload: Buffer.alloc(70_000, 0x20), done: true, revision: 2n ** 60n },
  ],
  [
    "the largest ids",
    {
      invokeId: 2n ** 64n - 1n,
      contentType: "text/event-stream",
      payload: Buffer.alloc(300, 0x61),
      done: false,
      revision: 2n ** 64n - 1n,
    },
  ],
  ["ids at a varint's byte boundaries", { invokeId: 127n, contentType: "a", payload: Buffer.alloc(127, 1), done: true, revision: 128n }],
  [
    "a content type that is not ASCII",
    { invokeId: 16_384n, contentType: "application/jsön; x=ü", payload: Buffer.from([0]), done: false, revision: 1n },
  ],
  ["an all-zero answer", { invokeId: 0n, contentType: "", payload: new Uint8Array(0), done: false, revision: 0n }],
];

const general = (piece: AnswerPiece) => create(SessionRequestSchema, { messageId: 0n, message: { case: "invokeAnswer", value: piece } });

describe("an invoke answer as the agent tells it", () => {
  it.each(pieces)("builds %s as create() does", (_, piece) => {
    const built = invokeAnswerRequest(piece);
    expect(built).toEqual(general(piece));
    expect(Buffer.from(toBinary(SessionRequestSchema, built)).equals(Buffer.from(toBinary(SessionRequestSchema, general(piece))))).toBe(
      true,
    );
  });

  it.each(pieces)("frames %s as protobuf-es encodes it", (_, piece) => {
    const expected = frame(toBinary(SessionRequestSchema, general(piece)));
    expect(framedAnswer(invokeAnswerRequest(piece))?.equals(expected)).toBe(true);
  });

  it.each([
    [
      "an answer with an error",
      create(SessionRequestSchema, {
        message: { case: "invokeAnswer", value: { invokeId: 1n, done: true, error: { code: "internal", message: "x" } } },
      }),
    ],
    [
      "an answer that wants a reply",
      create(SessionRequestSchema, { messageId: 5n, message: { case: "invokeAnswer", value: { invokeId: 1n } } }),
    ],
    ["a heartbeat", create(SessionRequestSchema, { messageId: 5n, message: { case: "heartbeat", value: {} } })],
    ["a log watch's lines", create(SessionRequestSchema, { message: { case: "logLines", value: { watchId: 1n } } })],
    ["no message at all", create(SessionRequestSchema, {})],
    [
      "an answer carrying unknown fields",
      (() => {
        const m = invokeAnswerRequest(pieces[0]![1]);
        (m.message.value as { $unknown?: unknown }).$unknown = [{ no: 99, wireType: 0, data: new Uint8Array([1]) }];
        return m;
      })(),
    ],
  ])("leaves %s to protobuf-es", (_, request) => {
    expect(framedAnswer(request)).toBeUndefined();
  });
});
