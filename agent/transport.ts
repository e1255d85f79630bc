// How the agent reaches the control plane: gRPC over HTTP/2 with mutual TLS, trusting only the
// CA it pinned at enrollment.
import { createClient, type Client } from "@connectrpc/connect";
import { createGrpcTransport } from "@connectrpc/connect-node";
import { AgentService } from "../gen/proto/modelforge/agent/v1/agent_pb.js";
import type { AgentState } from "./state.js";

export type AgentClient = Client<typeof AgentService>;

export function nodeClient(state: Pick<AgentState, "serverUrl" | "caPem" | "certPem" | "keyPem">): AgentClient {
  return createClient(
    AgentService,
    createGrpcTransport({
      baseUrl: state.serverUrl,
      nodeOptions: { ca: state.caPem, cert: state.certPem, key: state.keyPem },
      // Notice a dead connection even when the stream is idle.
      pingIntervalMs: 15_000,
      pingTimeoutMs: 10_000,
    }),
  );
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
