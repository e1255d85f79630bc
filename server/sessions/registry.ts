// Which nodes hold an open Session stream on this replica, and how to reach or end them. One
// session per node: a newer one replaces the older (the agent reconnected).
import { Code, ConnectError } from "@connectrpc/connect";
import type { SessionResponse } from "../../gen/proto/modelforge/agent/v1/agent_pb.js";

export interface LiveSession {
  readonly nodeId: string;
  readonly serial: string;
  send(message: SessionResponse): boolean;
  close(reason: ConnectError): void;
}

export class SessionRegistry {
  private readonly byNode = new Map<string, LiveSession>();

  attach(session: LiveSession): void {
    const previous = this.byNode.get(session.nodeId);
    this.byNode.set(session.nodeId, session);
    previous?.close(new ConnectError("replaced by a newer session of the same node", Code.Aborted));
  }
  detach(session: LiveSession): void {
    if (this.byNode.get(session.nodeId) === session) this.byNode.delete(session.nodeId);
  }
  get(nodeId: string): LiveSession | undefined {
    return this.byNode.get(nodeId);
  }
  isConnected(nodeId: string): boolean {
    return this.byNode.has(nodeId);
  }
  get size(): number {
    return this.byNode.size;
  }
  closeNode(nodeId: string, reason: ConnectError): void {
    this.byNode.get(nodeId)?.close(reason);
  }
  closeSerials(serials: Iterable<string>, reason: ConnectError): void {
    const set = new Set(serials);
    for (const s of this.byNode.values()) if (set.has(s.serial)) s.close(reason);
  }
  closeAll(reason: ConnectError): void {
    for (const s of [...this.byNode.values()]) s.close(reason);
  }
}
