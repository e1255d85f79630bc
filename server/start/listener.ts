// The one HTTP/2 TLS port: Connect, gRPC and gRPC-Web, the web console, and the agents' Session
// streams on the core stream API. It opens before the database does, with the routes that need
// none; `serve` swaps in the rest once everything is built.
import http2 from "node:http2";
import type { TLSSocket } from "node:tls";
import type { AddressInfo, Socket } from "node:net";
import type { Config } from "../config.js";
import type { Clock } from "../../common/clock.js";
import type { Logger } from "../observability/logger.js";
import { correlationHeader, correlationIdFrom } from "../observability/correlation.js";
import { processAllocator } from "../observability/allocator.js";
import { floodPolicy, FloodLogger } from "../observability/flood-log.js";
import { judgeHandshakeFailure } from "../observability/tls-handshake.js";
import { isGrpcSession } from "../sessions/session-grpc.js";
import type { EdgeGuard } from "../edge/guard.js";
import type { ConsoleFiles } from "../ui/static.js";
import type { Ca, ServerCertificate } from "../identity/pki/ca.js";
import { http2ServerTuning, listenBacklog } from "../tuning.js";
import type { Loop } from "./loops.js";
import { startingFrontDoor, type FrontDoor } from "../openai/front-door.js";

/** Answers one request (after the console and the edge guard had their turn). */
export type RequestHandler = (req: http2.Http2ServerRequest, res: http2.Http2ServerResponse, correlationId: string) => void;
/** Serves one gRPC Session stream. */
export type SessionStreamHandler = (stream: http2.ServerHttp2Stream, headers: http2.IncomingHttpHeaders) => void;

export interface ListenerDeps {
  config: Pick<Config, "port" | "listenAddress" | "http1IdleTimeoutMs">;
  log: Logger;
  clock: Clock;
  ca: Ca;
  tls: ServerCertificate;
  consoleFiles: ConsoleFiles;
  guard: EdgeGuard;
  /** What answers until `serve` is called. */
  starting: RequestHandler;
}

export interface Listener {
  /** e.g. https://127.0.0.1:8443 */
  url: string;
  port: number;
  /** Replaces the starting routes with the full ones (and the front doors': the OpenAI API, the console's sign-in), and serves gRPC Session streams on `session` (without it, through `handler`). */
  serve(handler: RequestHandler, session: SessionStreamHandler | undefined, frontDoors: readonly FrontDoor[]): void;
  /** Stops taking connections; resolves once every open one has closed. */
  stopAccepting(): Promise<void>;
  /** Asks every connection to finish its streams (GOAWAY), destroying what is left after `graceMs`; resolves when `closed` does. */
  endConnections(closed: Promise<void>, graceMs: number): Promise<void>;
  /** A start that failed: every connection dropped, the port closed. */
  abandon(): Promise<void>;
  /** A new epoch's TLS session ticket keys, run periodically. */
  ticketKeys: Loop;
}

export async function openListener(deps: ListenerDeps): Promise<Listener> {
  const { ca, clock } = deps;
  let handle = deps.starting;
  // The OpenAI API and the console's sign-in read their own bodies and answer in their own shapes:
  // they go before the edge guard.
  let frontDoors: readonly FrontDoor[] = [startingFrontDoor()];
  let serveSession: SessionStreamHandler | undefined;
  const server = http2.createSecureServer(
    {
      ...http2ServerTuning,
      key: deps.tls.keyPem,
      cert: deps.tls.certPem,
      ca: [ca.certPem],
      // One port for everyone: a client certificate is asked for but not required, and each RPC
      // decides whether it needs one.
      requestCert: true,
      rejectUnauthorized: false,
      allowHTTP1: true,
      ticketKeys: ca.sessionTicketKeys(clock.now()),
    },
    (req, res) => {
      const id = correlationIdFrom(req.headers[correlationHeader]);
      res.setHeader(correlationHeader, id);
      if (deps.consoleFiles.serve(req, res)) return;
      for (const door of frontDoors) if (door(req, res, id)) return;
      deps.guard(req, res, id);
      handle(req, res, id);
    },
  );
  // The HTTP/1.1 fallback keeps a connection between requests for the HTTP/1 server's
  // keepAliveTimeout, which an Http2SecureServer leaves unset: an idle keep-alive connection then
  // stayed open until its client closed it. Clients learn the bound from the Keep-Alive header.
  (server as unknown as { keepAliveTimeout: number }).keepAliveTimeout = deps.config.http1IdleTimeoutMs;
  // gRPC Session streams skip the compatibility layer (one request/response pair per stream) and
  // are served on the core stream API; every other stream goes on to it as before.
  const compat = server.listeners("stream") as ((...args: unknown[]) => void)[];
  if (compat.length !== 1) throw new Error("node:http2 no longer installs one compatibility stream listener");
  server.removeAllListeners("stream");
  server.on("stream", (stream, headers, ...rest) => {
    if (serveSession !== undefined && isGrpcSession(headers)) serveSession(stream, headers);
    else compat[0]!.call(server, stream, headers, ...rest);
  });
  logHandshakeFailures(server, deps.log);
  const { sockets, connections } = track(server);
  const url = await listen(server, deps.config);
  const port = (server.address() as AddressInfo).port;
  deps.log.info({ url, caFingerprint: ca.fingerprint, allocator: processAllocator() }, "control plane serving");
  const stopAccepting = () => new Promise<void>((resolve) => server.close(() => resolve()));
  return {
    url,
    port,
    serve(handler, session, doors) {
      handle = handler;
      serveSession = session;
      frontDoors = doors;
    },
    stopAccepting,
    async endConnections(closed, graceMs) {
      for (const c of connections) c.close();
      const timer = setTimeout(() => {
        for (const c of connections) c.destroy();
        for (const raw of sockets) raw.destroy();
      }, graceMs);
      await closed;
      clearTimeout(timer);
    },
    async abandon() {
      for (const c of connections) c.destroy();
      await stopAccepting();
    },
    ticketKeys: {
      name: "session ticket keys",
      everyMs: 60_000,
      // The same on every replica; older tickets then fall back to a full handshake.
      run: async () => {
        const keys = ca.sessionTicketKeys(clock.now());
        if (!keys.equals(server.getTicketKeys())) server.setTicketKeys(keys);
      },
    },
  };
}

/**
 * Failed handshakes: a client that no longer trusts our CA (an agent from before the CA was
 * replaced) at warn, through the flood-proof logger since anyone can cause it; probes and
 * scanners at debug. After a reset the TLS socket has lost its address and byte count; the raw
 * socket under it (Node's `_parent`) keeps both, once its address was read on connection (cached).
 */
function logHandshakeFailures(server: http2.Http2SecureServer, log: Logger): void {
  const handshakeFailures = new FloodLogger(log, "TLS handshake failed", floodPolicy);
  server.on("tlsClientError", (err: NodeJS.ErrnoException, socket: TLSSocket) => {
    const raw = (socket as TLSSocket & { _parent?: Socket })._parent;
    const peer = socket.remoteAddress ?? raw?.remoteAddress ?? "unknown";
    const verdict = judgeHandshakeFailure({ code: err.code, bytesRead: raw?.bytesRead ?? socket.bytesRead });
    if (verdict.level === "warn") handshakeFailures.warn(peer, { code: err.code, reason: verdict.reason });
    else log.debug({ code: err.code ?? err.message, peer, reason: verdict.reason }, "TLS handshake failed");
  });
}

/**
 * Raw sockets are tracked as well as HTTP/2 sessions: at the end of the shutdown grace every one
 * is destroyed, since an HTTP/2 session's own close waits for its socket to flush, which a
 * half-open peer never lets happen (nor does one stuck in its TLS handshake ever become a session).
 */
function track(server: http2.Http2SecureServer) {
  const sockets = new Set<Socket>();
  server.on("connection", (raw: Socket) => {
    void raw.remoteAddress;
    sockets.add(raw);
    raw.once("close", () => sockets.delete(raw));
  });
  const connections = new Set<http2.ServerHttp2Session>();
  server.on("session", (s) => {
    connections.add(s);
    s.on("close", () => connections.delete(s));
  });
  return { sockets, connections };
}

/** Listens, and says where: a wildcard address is reached on loopback. */
async function listen(server: http2.Http2SecureServer, config: Pick<Config, "port" | "listenAddress">): Promise<string> {
  await new Promise<void>((resolve, reject) => {
    server.once("error", reject);
    server.listen({ port: config.port, host: config.listenAddress, backlog: listenBacklog }, () => {
      server.off("error", reject);
      resolve();
    });
  });
  const port = (server.address() as AddressInfo).port;
  const host = config.listenAddress.includes(":") ? `[${config.listenAddress}]` : config.listenAddress;
  return `https://${host === "0.0.0.0" || host === "[::]" ? "127.0.0.1" : host}:${port}`;
}
