// Instructions the server sends agents, over the node's open session when there is one, otherwise
// at the node's next heartbeat or session start (from the node's persisted renewal request).
import { create } from "@bufbuild/protobuf";
import { InstructionSchema, SessionResponseSchema, type Instruction } from "../../gen/proto/modelforge/agent/v1/agent_pb.js";
import type { NodeSessions } from "../node-sessions.js";

export function renewalInstruction(reason: string): Instruction {
  return create(InstructionSchema, { kind: { case: "renewCredential", value: { reason } } });
}

export function pendingInstructions(node: { renewalRequestedAt: Date | null; renewalReason: string | null }): Instruction[] {
  return node.renewalRequestedAt !== null ? [renewalInstruction(node.renewalReason ?? "renewal requested")] : [];
}

/** True when the node had an open session here and the instruction was queued on it. */
export function pushRenewal(sessions: Pick<NodeSessions, "get">, nodeId: string, reason: string): boolean {
  const session = sessions.get(nodeId);
  if (session === undefined) return false;
  return session.send(create(SessionResponseSchema, { message: { case: "instruction", value: renewalInstruction(reason) } }));
}
