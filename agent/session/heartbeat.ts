// The session's heartbeat: the agent's version and its clock's time, answered by the server's time
// and any instructions. Every heartbeat has a deadline for its answer: a heartbeat needs no I/O on
// the server, so a missing answer means a hung server or a dead stream, and the session ends. It
// also carries the requests at each deployment replica that has any, which the control plane
// routes by; an idle node's heartbeat stays the plain one the server reads straight off the wire.
import { timestampFromMs } from "@bufbuild/protobuf/wkt";
import type { Logger } from "pino";
import type { MessageInitShape } from "@bufbuild/protobuf";
import type { Instruction, ReplicaLoadSchema } from "../../gen/proto/modelforge/agent/v1/agent_pb.js";
import type { Clock } from "../../common/clock.js";
import { agentVersion } from "../version.js";
import { publish, type SessionLink } from "./link.js";
import type { SessionObserver } from "./options.js";

export interface HeartbeatDeps {
  link: SessionLink;
  log: Logger;
  clock: Clock;
  /** Aborted when the session ends. */
  ended: AbortSignal;
  /** Arms the deadline for `what`, which ends the session when it passes; returns its disarm. */
  deadline(what: string): () => void;
  observer?: SessionObserver | undefined;
  /** Each held deployment replica's requests (none without runtimes). */
  loads?: (() => MessageInitShape<typeof ReplicaLoadSchema>[]) | undefined;
}

/** The contract's bound on a heartbeat's replica_loads. */
const maxReplicaLoads = 256;

/**
 * Sends one heartbeat and resolves with the instructions in its answer (none when it was refused
 * or not delivered; the deadline, not this, ends a session the server stopped answering).
 */
export async function sendHeartbeat(deps: HeartbeatDeps): Promise<Instruction[]> {
  const disarm = deps.deadline("heartbeat answer");
  const sentAt = performance.now();
  // A replica with nothing in flight is left out: the server counts an unlisted replica as idle.
  const replicaLoads = (deps.loads?.() ?? []).filter((l) => (l.inFlight ?? 0) > 0).slice(0, maxReplicaLoads);
  try {
    const result = await publish(
      deps.link,
      deps.log,
      deps.ended,
      "Heartbeat",
      { case: "heartbeat", value: { agentVersion, sentAt: timestampFromMs(deps.clock.now()), replicaLoads } },
      (answer) => deps.observer?.heartbeat?.(performance.now() - sentAt, answer.case === "error"),
    );
    return result?.case === "heartbeat" ? result.value.instructions : [];
  } finally {
    disarm();
  }
}
