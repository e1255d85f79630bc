// How the agent reaches the control plane: gRPC over HTTP/2 with mutual TLS, trusting only the
// CA it pinned at enrollment.
import { Code, ConnectError, createClient, type Client } from "@connectrpc/connect";
import { SteadySessionManager, grpcTransport } from "../../common/http2-sessions.js";
import { AgentService, type SessionRequest, type SessionResponse } from "../../gen/proto/modelforge/agent/v1/agent_pb.js";
import type { AgentState } from "../state.js";
import { isIP } from "node:net";
import tls from "node:tls";
import { dialHost } from "../../common/url-host.js";
import { grpcSession } from "./grpc-session.js";

export type AgentClient = Client<typeof AgentService>;

export function nodeClient(state: Pick<AgentState, "serverUrl" | "caPem" | "certPem" | "keyPem">): AgentClient {
  return createClient(
    AgentService,
    grpcTransport({
      baseUrl: state.serverUrl,
      nodeOptions: { ca: state.caPem, cert: state.certPem, key: state.keyPem },
      ...pings,
    }),
  );
}

/**
 * One connection to the control plane, opened for one session and closed after it (so a failed
 * attempt never leaves a connection behind for the next one to pile onto). The agent's own is
 * below; the fleet benchmark may carry the same loop on another.
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
export function nodeConnection(
  state: Pick<AgentState, "serverUrl" | "caPem" | "certPem" | "keyPem">,
  { fastPath = true }: { fastPath?: boolean } = {},
): NodeConnection {
  const manager = new SteadySessionManager(state.serverUrl, pings, {
    createConnection: resumingTls({ ca: state.caPem, cert: state.certPem, key: state.keyPem }, state.certPem),
  });
  const client = createClient(AgentService, grpcTransport({ baseUrl: state.serverUrl, sessionManager: manager }));
  return {
    // The Session framed by hand (./grpc-session.ts), or through Connect's client (fastPath false).
    session: (requests, options) => (fastPath ? grpcSession(manager, requests, options) : client.session(requests, options)),
    renewCredential: (request, options) => client.renewCredential(request, options),
    close: () => manager.abort(new ConnectError("session ended", Code.Canceled)),
  };
}

/**
 * The TLS session the control plane last gave each certificate, kept in memory to resume the next
 * connection with: a reconnect (after a server restart, say) then needs no signature on either
 * side. Keyed by certificate, so a renewed credential never resumes as the old one. Bounded for
 * the fleet benchmark, which holds thousands of certificates in one process.
 */
const resumable = new Map<string, Buffer>();
const maxResumable = 100_000;

/**
 * Node 20's tls.connect decodes a `session` option twice (in TLSSocket's constructor and again
 * after it), and each decode (d2i_SSL_SESSION, the server certificate's key through OpenSSL 3.0's
 * slow decoder set-up) was a large share of bench/heartbeats.ts's load generator during a
 * restart. The socket's own setSession, which tls.connect itself calls, decodes it once. It is
 * offered when TCP has connected, just before the handshake starts (tls.connect starts it from
 * its own 'connect' listener, so ours goes first): an attempt refused while the server is down,
 * which is most of them in an outage, never decodes it. Not in Node's documented API, so the
 * option stays the fallback.
 */
type Offering = tls.TLSSocket & { setSession?: (session: Buffer) => void };
const canOfferLater = typeof (tls.TLSSocket.prototype as Offering).setSession === "function";
const offer = (socket: tls.TLSSocket, session: Buffer) => (socket as Offering).setSession!(session);

/**
 * http2's `createConnection` for the control plane: TLS with these credentials (or a prepared
 * context), offering the session last given to `certificate`, remembering the next one.
 */
export function resumingTls(credentials: tls.ConnectionOptions, certificate: string): (authority: URL) => tls.TLSSocket {
  return (authority) => {
    const host = dialHost(authority);
    const saved = resumable.get(certificate);
    const socket = tls.connect({
      ...credentials,
      host,
      port: Number(authority.port || 443),
      // SNI carries names only (RFC 6066); an IP address is checked against the certificate all the same.
      ...(isIP(host) === 0 ? { servername: host } : {}),
      ALPNProtocols: ["h2"],
      ...(saved !== undefined && !canOfferLater ? { session: saved } : {}),
    });
    if (saved !== undefined && canOfferLater) socket.prependOnceListener("connect", () => offer(socket, saved));
    socket.on("session", (session: Buffer) => {
      if (resumable.size >= maxResumable && !resumable.has(certificate)) resumable.clear();
      resumable.set(certificate, session);
    });
    return socket;
  };
}

/** Before enrollment: a server whose CA is pinned but which has issued us nothing yet. */
export function pinnedClient(serverUrl: string, caPem: string): AgentClient {
  return createClient(AgentService, grpcTransport({ baseUrl: serverUrl, nodeOptions: { ca: caPem } }));
}

/**
 * Only for GetServerInfo during enrollment: the server's certificate cannot be checked yet, so
 * the answer is trusted only if its CA matches the fingerprint from the join command, and every
 * later call verifies the server against that CA.
 */
export function unverifiedClient(serverUrl: string): AgentClient {
  return createClient(AgentService, grpcTransport({ baseUrl: serverUrl, nodeOptions: { rejectUnauthorized: false } }));
}
