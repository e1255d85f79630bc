// How the agent reaches the control plane: gRPC over HTTP/2 with mutual TLS, trusting only the
// CA it pinned at enrollment.
import { Code, ConnectError, createClient, type Client } from "@connectrpc/connect";
import { createGrpcTransport, Http2SessionManager } from "@connectrpc/connect-node";
import { AgentService, type SessionRequest, type SessionResponse } from "../gen/proto/modelforge/agent/v1/agent_pb.js";
import type { AgentState } from "./state.js";

export type AgentClient = Client<typeof AgentService>;

export function nodeClient(state: Pick<AgentState, "serverUrl" | "caPem" | "certPem" | "keyPem">): AgentClient {
  return createClient(
    AgentService,
    createGrpcTransport({
      baseUrl: state.serverUrl,
      nodeOptions: { ca: state.caPem, cert: state.certPem, key: state.keyPem },
      ...pings,
    }),
  );
}

/**
 * One connection to the control plane, opened for one session and closed after it (so a failed
 * attempt never leaves a connection behind for the next one to pile onto). The agent's own is
 * ./transport.ts's Connect transport; the fleet benchmark may carry the same loop on another.
 */
export interface NodeConnection {
  session(requests: AsyncIterable<SessionRequest>, options: { signal: AbortSignal }): AsyncIterable<SessionResponse>;
  renewCredential(request: { csrPem: string }, options: { signal: AbortSignal; timeoutMs: number }): Promise<{ certificatePem: string }>;
  /** Ends the connection and everything on it (idempotent). */
  close(): void;
}

/** Notice a dead connection even when the stream is idle. */
const pings = { pingIntervalMs: 15_000, pingTimeoutMs: 10_000 };

/**
 * The connection for one Session: its own HTTP/2 session, closed when the session ends. (A
 * transport left to itself keeps an idle connection for 15 minutes, and one still handshaking
 * when the agent gave up on it keeps handshaking: in a restart storm every failed attempt would
 * leave one behind on the new server.)
 */
export function nodeConnection(state: Pick<AgentState, "serverUrl" | "caPem" | "certPem" | "keyPem">): NodeConnection {
  const manager = new Http2SessionManager(state.serverUrl, pings, { ca: state.caPem, cert: state.certPem, key: state.keyPem });
  const client = createClient(AgentService, createGrpcTransport({ baseUrl: state.serverUrl, sessionManager: manager }));
  return {
    session: (requests, options) => client.session(requests, options),
    renewCredential: (request, options) => client.renewCredential(request, options),
    close: () => manager.abort(new ConnectError("session ended", Code.Canceled)),
  };
}

/** Before enrollment: a server whose CA is pinned but which has issued us nothing yet. */
export function pinnedClient(serverUrl: string, caPem: string): AgentClient {
  return createClient(AgentService, createGrpcTransport({ baseUrl: serverUrl, nodeOptions: { ca: caPem } }));
}

/**
 * Only for GetServerInfo during enrollment: the server's certificate cannot be checked yet, so
 * the answer is trusted only if its CA matches the fingerprint from the join command, and every
 * later call verifies the server against that CA.
 */
export function unverifiedClient(serverUrl: string): AgentClient {
  return createClient(AgentService, createGrpcTransport({ baseUrl: serverUrl, nodeOptions: { rejectUnauthorized: false } }));
}
