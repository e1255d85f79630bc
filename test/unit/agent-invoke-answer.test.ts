// The agent's invoke answer, built as a message literal (agent/deployments/invoke-answer.ts), is
// the message create() builds, and encodes to the same bytes.
import { describe, expect, it } from "vitest";
import { create, toBinary } from "@bufbuild/protobuf";
import { SessionRequestSchema } from "../../gen/proto/modelforge/agent/v1/agent_pb.js";
import { invokeAnswerRequest, type AnswerPiece } from "../../agent/deployments/invoke-answer.js";

describe("an invoke answer as the agent tells it", () => {
  it.each<[string, AnswerPiece]>([
    [
      "a stream chunk",
      { invokeId: 7n, contentType: "application/json", payload: Buffer.from('{"choices":[]}'), done: false, revision: 3n },
    ],
    ["the last, empty piece", { invokeId: 7n, contentType: "application/json", payload: new Uint8Array(0), done: true, revision: 3n }],
    ["zero ids and no content type", { invokeId: 0n, contentType: "", payload: Buffer.from("{}"), done: false, revision: 0n }],
    [
      "large ids",
      { invokeId: 2n ** 63n, contentType: "application/json", payload: Buffer.alloc(70_000, 0x20), done: true, revision: 2n ** 60n },
    ],
  ])("builds %s as create() does", (_, piece) => {
    const general = create(SessionRequestSchema, { messageId: 0n, message: { case: "invokeAnswer", value: piece } });
    const built = invokeAnswerRequest(piece);
    expect(built).toEqual(general);
    expect(Buffer.from(toBinary(SessionRequestSchema, built)).equals(Buffer.from(toBinary(SessionRequestSchema, general)))).toBe(true);
  });
});
