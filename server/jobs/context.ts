// What the job modules (create, reports, cancel, expiry) need from the engine: its dependencies
// and the follow-ups it owns (leasing passes, pushes down sessions, background tasks).
import type { JobLease } from "../../gen/proto/modelforge/jobs/v1/jobs_pb.js";
import type { Deps } from "../app.js";
import type { Liveness } from "../domain/liveness.js";

export interface JobContext {
  readonly deps: Deps;
  readonly prisma: Deps["db"]["prisma"];
  /** Liveness by server-received heartbeats, the newer of memory and database. */
  livenessOf(node: { id: string; lastHeartbeatAt: Date | null; disabledAt?: Date | null; decommissionedAt?: Date | null }, now: number): Liveness;
  /** Starts a leasing pass for a node with a session here, without waiting for it. */
  kick(nodeId: string): void;
  /** Pushes a lease down the node's session here; false when it has none. */
  sendLease(nodeId: string, lease: JobLease): boolean;
  /** Tells the node's session here to stop an attempt; false when it has none. */
  sendCancel(nodeId: string, jobId: string, attempt: number, reason: string, leaseLost?: boolean): boolean;
  /** After a job finished: its ordering key's next job may now be leasable. */
  afterFinish(job: { nodeId: string; orderingKey: string | null }): Promise<void>;
  /** Runs a follow-up without waiting; a failure is logged. */
  later(what: string, task: () => Promise<unknown>): void;
}
