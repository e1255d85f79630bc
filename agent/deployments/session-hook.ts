// How deployments plug into the agent's Session (agent/session/run.ts): what Hello reports as held,
// and the server's pushes that are not jobs (invokes, their cancellations, log watches).
import type { MessageInitShape } from "@bufbuild/protobuf";
import type {
  HeldDeploymentSchema,
  ReplicaLoadSchema,
  SessionRequestSchema,
  SessionResponse,
} from "../../gen/proto/modelforge/agent/v1/agent_pb.js";
import type { AnswerPiece } from "./invoke-answer.js";

export type SessionMessage = NonNullable<MessageInitShape<typeof SessionRequestSchema>["message"]>;

/** The open session as the relay uses it. */
export interface RelayLink {
  /** One message, resolved when the server acknowledged it. */
  send(message: SessionMessage): Promise<unknown>;
  /** One message the server does not acknowledge (an invoke answer); false when the session has closed. */
  tell(message: SessionMessage): boolean;
  /** One piece of an invoke's answer without an error, told as tell() does. */
  tellAnswer(piece: AnswerPiece): boolean;
}

export interface SessionDeployments {
  held(): MessageInitShape<typeof HeldDeploymentSchema>[];
  /** Each held replica's requests, for heartbeats (the control plane routes by its queue). */
  loads(): MessageInitShape<typeof ReplicaLoadSchema>[];
  /** Told when a runtime ended without being asked to; returns what stops the telling. */
  onLost(listener: () => void): () => void;
  onMessage(message: SessionResponse["message"], link: RelayLink): void;
}
