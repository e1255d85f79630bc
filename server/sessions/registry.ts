// Which nodes hold an open Session stream on this replica, and how to reach or end them. One
// session per node: a newer one replaces the older (the agent reconnected). Ending a node's or a
// credential's session is also told to the other replicas (server/cluster/bus.ts), since the
// session may be held on any of them.
import { Code, ConnectError } from "@connectrpc/connect";
import { loggedByHandler } from "../observability/call-log.js";
import type { ClusterEvent } from "../cluster/bus.js";
import type { LiveSession, NodeSessions } from "../node-sessions.js";

/**
 * Why sessions end when the server stops: unavailable, which the agent retries. The server logs
 * its shutdown once, so each session it ends is a debug line, not a warning (a graceful restart
 * would otherwise log one per node).
 */
export const shuttingDown = () => loggedByHandler(new ConnectError("server shutting down", Code.Unavailable));

export class SessionRegistry implements NodeSessions {
  private readonly byNode = new Map<string, LiveSession>();

  /** `elsewhere` tells the other replicas (none until the cluster bus is wired). */
  constructor(private readonly elsewhere: (event: ClusterEvent) => void = () => undefined) {}

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
    this.closeNodeHere(nodeId, reason);
    this.elsewhere({ kind: "close-node", nodeId, code: reason.code, message: reason.rawMessage });
  }
  closeSerials(serials: Iterable<string>, reason: ConnectError): void {
    const list = [...serials];
    this.closeSerialsHere(list, reason);
    if (list.length > 0) this.elsewhere({ kind: "close-serials", serials: list, code: reason.code, message: reason.rawMessage });
  }
  closeNodeHere(nodeId: string, reason: ConnectError): void {
    this.byNode.get(nodeId)?.close(reason);
  }
  closeSerialsHere(serials: Iterable<string>, reason: ConnectError): void {
    const set = new Set(serials);
    for (const s of [...this.byNode.values()]) if (set.has(s.serial)) s.close(reason);
  }
  tellHolder(event: Extract<ClusterEvent, { kind: "work" | "cancel" }>): void {
    if (!this.byNode.has(event.nodeId)) this.elsewhere(event);
  }
  closeAll(reason: ConnectError): void {
    for (const s of [...this.byNode.values()]) s.close(reason);
  }
}
