// The seam between sessions and jobs: how a Session answers job messages and what happens when a
// node's session opens.
import type { Reply, SessionRequest } from "../../gen/proto/modelforge/agent/v1/agent_pb.js";

export type JobMessage = Extract<SessionRequest["message"], { case: "jobProgress" | "jobComplete" | "jobFail" }>;

export interface JobDispatch {
  answer(nodeId: string, message: JobMessage): Promise<Reply["result"]>;
  sessionOpened(nodeId: string, runningJobIds: string[], correlationId: string): Promise<void>;
}
