// An invoke answer as the Session request that carries it, built as the message itself: every
// stream chunk a runtime produces becomes one, and protobuf-es's create() fills a message by
// reflection (its zero message, then each field of the init), which showed in the agent's profile
// per chunk (bench/openai.ts, BENCH_CPU_PROF). test/unit/agent-invoke-answer.test.ts holds it
// equal to create()'s.
import type { SessionRequest } from "../../gen/proto/modelforge/agent/v1/agent_pb.js";

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
