// An invoke answer as the Session request that carries it, built as the message itself: every
// stream chunk a runtime produces becomes one, and protobuf-es's create() fills a message by
// reflection (its zero message, then each field of the init), which showed in the agent's profile
// per chunk (bench/openai.ts, BENCH_CPU_PROF). test/unit/agent-invoke-answer.test.ts holds it
// equal to create()'s.
import type { SessionRequest } from "../../gen/proto/modelforge/agent/v1/agent_pb.js";
import { pushField, pushString, pushVarint } from "../../common/protobuf-wire.js";

export interface AnswerPiece {
  invokeId: bigint;
  contentType: string;
  payload: Uint8Array;
  done: boolean;
  revision: bigint;
}

/** SessionRequest { message_id 0 (no reply wanted), invoke_answer } without an error. */
export function invokeAnswerRequest(piece: AnswerPiece): SessionRequest {
  return {
    $typeName: "modelforge.agent.v1.SessionRequest",
    messageId: 0n,
    message: {
      case: "invokeAnswer",
      value: {
        $typeName: "modelforge.agent.v1.InvokeAnswer",
        invokeId: piece.invokeId,
        contentType: piece.contentType,
        payload: piece.payload,
        done: piece.done,
        error: undefined,
        revision: piece.revision,
      },
    },
  };
}

/**
 * `request` as one gRPC message ([0][uint32 length][SessionRequest]), encoded as protobuf-es
 * encodes it, when it is an answer built by invokeAnswerRequest (no error, no reply wanted);
 * undefined for any other message, which protobuf-es encodes. Every chunk a runtime streams is
 * one, and protobuf-es's reflective writer was the agent's largest package per chunk.
 */
export function framedAnswer(request: SessionRequest): Buffer | undefined {
  const m = request.message;
  if (m.case !== "invokeAnswer" || request.messageId !== 0n || m.value.error !== undefined) return undefined;
  if (hasUnknown(request) || hasUnknown(m.value)) return undefined;
  const a = m.value;
  const head: number[] = [];
  if (a.invokeId !== 0n) pushField(head, 0x08, a.invokeId);
  pushString(head, 0x12, a.contentType);
  if (a.payload.length > 0) {
    head.push(0x1a);
    pushVarint(head, a.payload.length);
  }
  const tail: number[] = [];
  if (a.done) tail.push(0x20, 0x01);
  if (a.revision !== 0n) pushField(tail, 0x30, a.revision);
  const answerLength = head.length + a.payload.length + tail.length;
  const prefix: number[] = [0x4a];
  pushVarint(prefix, answerLength);
  const length = prefix.length + answerLength;
  const out = Buffer.allocUnsafe(5 + length);
  out[0] = 0;
  out.writeUInt32BE(length, 1);
  out.set(prefix, 5);
  out.set(head, 5 + prefix.length);
  out.set(a.payload, 5 + prefix.length + head.length);
  out.set(tail, 5 + prefix.length + head.length + a.payload.length);
  return out;
}

const hasUnknown = (m: { $unknown?: unknown[] }) => m.$unknown !== undefined && m.$unknown.length > 0;
