// The node sessions a replica holds, as the features that reach nodes see them (jobs, nodes,
// enrollment, invoke). server/sessions/registry.ts implements it. Those features depend on this
// interface rather than on sessions/, which uses them in turn.
import type { ConnectError } from "@connectrpc/connect";
import type { SessionResponse } from "../gen/proto/modelforge/agent/v1/agent_pb.js";
import type { InvokeApi } from "../gen/proto/modelforge/deployment/v1/deployment_pb.js";
import type { ClusterEvent } from "./cluster/bus.js";

export interface LiveSession {
  readonly nodeId: string;
  readonly serial: string;
  /** The engines whose runtimes its agent said serve embeddings (Hello.embedding_engines). */
  readonly embeddingEngines: readonly string[];
  /** Requests waiting for a replica's runtime on the node, as its latest heartbeat said (0 when not listed). */
  queuedAt(deploymentId: string, revision: bigint, replica: number): number;
  send(message: SessionResponse): boolean;
  /** Pushes an InvokeStart: on the gRPC Session encoded by hand (sessions/invoke-wire.ts). False once the session has ended. */
  sendInvoke(start: InvokePush): boolean;
  close(reason: ConnectError): void;
}

/** An InvokeStart's fields, as the relay sends them. */
export interface InvokePush {
  invokeId: bigint;
  deploymentId: string;
  requestId: string;
  contentType: string;
  payload: Uint8Array;
  timeoutMs: number;
  revision: bigint;
  /** The slot's own runtime: a node may hold several replicas of the revision. */
  replica: number;
  api: InvokeApi;
  stream: boolean;
}

export interface NodeSessions {
  get(nodeId: string): LiveSession | undefined;
  isConnected(nodeId: string): boolean;
  readonly size: number;
  /** Ends the node's session, here or on another replica. */
  closeNode(nodeId: string, reason: ConnectError): void;
  /** Ends these credentials' sessions, here or on other replicas. */
  closeSerials(serials: Iterable<string>, reason: ConnectError): void;
  /** Asks the replica holding the node's session, if not this one, to act for it. */
  tellHolder(event: Extract<ClusterEvent, { kind: "work" | "cancel" }>): void;
}
