// Live runtime logs: a watcher's WatchDeploymentLogs becomes a LogWatch on the Session of each
// node serving the deployment, and the node's DeploymentLogLines come back to that watcher. The
// node forwards output only while a watch is open (it keeps a bounded tail meanwhile), and its
// rate limit and dropped-line counter bound what a chatty runtime can push through the stream.
import { create } from "@bufbuild/protobuf";
import { Code, ConnectError } from "@connectrpc/connect";
import { SessionResponseSchema, type DeploymentLogLines } from "../../gen/proto/modelforge/agent/v1/agent_pb.js";
import type { RuntimeLogLine } from "../../gen/proto/modelforge/deployment/v1/deployment_pb.js";
import { AsyncQueue } from "../../common/queue.js";
import { onAbort } from "../../common/abort.js";
import type { LiveSession, NodeSessions } from "../node-sessions.js";

export interface LogBatch {
  nodeId: string;
  lines: RuntimeLogLine[];
  droppedLines: bigint;
}

interface Watch {
  session: LiveSession;
  batches: AsyncQueue<LogBatch>;
  /** Node watches of this watcher still open; the watcher's stream ends when none is. */
  open: { count: number };
}

/** Most log watches open on this replica at once. */
export const maxLogWatches = 256;

export class LogWatches {
  private nextId = 0n;
  private readonly watches = new Map<bigint, Watch>();

  constructor(private readonly sessions: Pick<NodeSessions, "get">) {}

  /** Follows one deployment's runtime output on `nodeIds` until `signal` aborts. */
  async *follow(deploymentId: string, nodeIds: string[], tailLines: number, signal: AbortSignal): AsyncGenerator<LogBatch> {
    const targets = nodeIds.map((nodeId) => {
      const session = this.sessions.get(nodeId);
      if (session === undefined) throw new ConnectError(`node ${nodeId} is not connected to this replica`, Code.Unavailable);
      return session;
    });
    if (this.watches.size + targets.length > maxLogWatches) {
      throw new ConnectError(`more than ${maxLogWatches} log watches are open on this replica`, Code.ResourceExhausted);
    }
    const batches = new AsyncQueue<LogBatch>();
    const open = { count: targets.length };
    const ids = targets.map((session) => {
      const watchId = ++this.nextId;
      this.watches.set(watchId, { session, batches, open });
      session.send(logWatch(watchId, deploymentId, true, tailLines));
      return watchId;
    });
    // The caller may have left before the watch was registered.
    const forgetAbort = onAbort(signal, () => batches.end());
    try {
      yield* batches;
    } finally {
      forgetAbort();
      for (const id of ids) {
        const w = this.watches.get(id);
        this.watches.delete(id);
        w?.session.send(logWatch(id, deploymentId, false, 0));
      }
    }
  }

  fromAgent(session: LiveSession, message: DeploymentLogLines): void {
    const w = this.watches.get(message.watchId);
    if (w === undefined || w.session !== session) return;
    if (message.lines.length > 0 || message.droppedLines > 0n) {
      w.batches.push({ nodeId: session.nodeId, lines: message.lines, droppedLines: message.droppedLines });
    }
    if (message.ended) {
      this.watches.delete(message.watchId);
      if (--w.open.count === 0) w.batches.end();
    }
  }

  sessionClosed(session: LiveSession): void {
    for (const [id, w] of this.watches) {
      if (w.session !== session) continue;
      this.watches.delete(id);
      w.batches.fail(new ConnectError(`node ${session.nodeId}'s session ended`, Code.Unavailable));
    }
  }
}

function logWatch(watchId: bigint, deploymentId: string, start: boolean, tailLines: number) {
  return create(SessionResponseSchema, { message: { case: "logWatch", value: { watchId, deploymentId, start, tailLines } } });
}
