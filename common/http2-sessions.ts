// connect-node's HTTP/2 session manager, without one way to crash the process that uses it.
//
// When a peer sends GOAWAY (NO_ERROR) on an idle connection, as a control plane does when it
// stops, connect-node destroys the session with an error that Node emits a little later. If a new
// request arrives in between, the manager opens a new connection and stops listening to the old
// one, and the late error then has no listener: an uncaught exception (connectrpc/connect-es#1768,
// unfixed in 2.1). An agent reconnecting during a control-plane restart hits exactly that window.
// Every session this manager hands a stream from keeps a listener that ignores such late errors:
// the manager still hears every error while it cares, and the streams carry theirs.
import type * as http2 from "node:http2";
import type { Transport } from "@connectrpc/connect";
import { createGrpcTransport, Http2SessionManager, type GrpcTransportOptions } from "@connectrpc/connect-node";

const ignore = () => undefined;

export class SteadySessionManager extends Http2SessionManager {
  private readonly guarded = new WeakSet<http2.Http2Session>();

  override async request(
    method: string,
    path: string,
    headers: http2.OutgoingHttpHeaders,
    options: Omit<http2.ClientSessionRequestOptions, "signal">,
  ): Promise<http2.ClientHttp2Stream> {
    const stream = await super.request(method, path, headers, options);
    const session = stream.session;
    if (session !== undefined && !this.guarded.has(session)) {
      this.guarded.add(session);
      session.on("error", ignore);
    }
    return stream;
  }
}

/**
 * createGrpcTransport over the given SteadySessionManager, or one made from the same options. The
 * only way in to connect-node's gRPC transport (biome.json restricts the import).
 */
export function grpcTransport(
  options: Omit<GrpcTransportOptions, "sessionManager"> & { sessionManager?: SteadySessionManager },
): Transport {
  const { baseUrl, nodeOptions, pingIntervalMs, pingIdleConnection, pingTimeoutMs, idleConnectionTimeoutMs } = options;
  const sessionManager =
    options.sessionManager ??
    new SteadySessionManager(baseUrl, { pingIntervalMs, pingIdleConnection, pingTimeoutMs, idleConnectionTimeoutMs }, nodeOptions);
  return createGrpcTransport({ ...options, sessionManager });
}
