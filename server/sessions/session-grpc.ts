// The Session stream in the gRPC protocol, served on Node's core HTTP/2 stream API. It runs the
// same session object as the Connect handler (./session.ts); it only bypasses Connect's generic
// streaming machinery and Node's HTTP/2 compatibility request/response, which together cost more
// CPU and memory per connection than this framing (bench/heartbeats.ts) and so kept a 2-core
// server from holding 5,000 agents. gRPC-Web and the Connect protocol still reach Session
// through Connect.
import http2 from "node:http2";
import type { TLSSocket } from "node:tls";
import { Code, ConnectError } from "@connectrpc/connect";
import { fromBinary, toBinary } from "@bufbuild/protobuf";
import { AgentService, SessionRequestSchema, SessionResponseSchema } from "../../gen/proto/modelforge/agent/v1/agent_pb.js";
import { codeName } from "../../common/codes.js";
import { peerOf } from "../context.js";
import type { Logger } from "../observability/logger.js";
import { correlationHeader, correlationIdFrom } from "../observability/correlation.js";
import { presentedIdentity } from "../identity/node-auth.js";
import { refuseServiceKeyElsewhere } from "../identity/service-keys-auth.js";
import { AgentSession, type SessionDeps } from "./session.js";
import { plainHeartbeatId } from "./heartbeat-wire.js";
import { publicError } from "../observability/call-log.js";
import { requestLimitOf } from "../edge/limits.js";

export const sessionPath = `/${AgentService.typeName}/${AgentService.method.session.name}`;

/** How long an ended Session stream waits for the agent to close its side before it is reset. */
const releaseAfterMs = 1_000;

/** Whether this request is a gRPC (not gRPC-Web, not Connect) call of Session with protobuf. */
export function isGrpcSession(headers: http2.IncomingHttpHeaders): boolean {
  if (headers[":path"] !== sessionPath) return false;
  const type = headers["content-type"] ?? "";
  return type === "application/grpc" || type === "application/grpc+proto";
}

/** Splits gRPC length-prefixed messages out of the byte stream. */
export class FrameReader {
  /** Received and not yet returned; joined only once a whole message is in. */
  private chunks: Buffer[] = [];
  private buffered = 0;
  constructor(private readonly maxMessageBytes = requestLimitOf(sessionPath, "application/grpc").bytes) {}
  /** Returns the complete messages in `chunk` (with what was left over before). */
  push(chunk: Buffer): Buffer[] {
    this.chunks.push(chunk);
    this.buffered += chunk.length;
    const out: Buffer[] = [];
    while (this.buffered >= 5) {
      if (this.chunks[0]!.length < 5) this.chunks = [Buffer.concat(this.chunks)];
      const head = this.chunks[0]!;
      if (head[0] !== 0) throw new ConnectError("compressed messages are not supported", Code.Unimplemented);
      const length = head.readUInt32BE(1);
      // Refused on its declared length, before any of it is held.
      if (length > this.maxMessageBytes) {
        throw new ConnectError(
          `message of ${length} bytes is over the limit of ${this.maxMessageBytes} bytes for ${sessionPath}`,
          Code.ResourceExhausted,
        );
      }
      if (this.buffered < 5 + length) break;
      const joined = this.chunks.length === 1 ? head : Buffer.concat(this.chunks);
      out.push(joined.subarray(5, 5 + length));
      const rest = joined.subarray(5 + length);
      this.chunks = rest.length > 0 ? [rest] : [];
      this.buffered = rest.length;
    }
    return out;
  }
  get empty(): boolean {
    return this.buffered === 0;
  }
}

export function frame(message: Uint8Array): Buffer {
  const out = Buffer.allocUnsafe(5 + message.length);
  out[0] = 0;
  out.writeUInt32BE(message.length, 1);
  out.set(message, 5);
  return out;
}

function trailersOf(err: ConnectError | undefined): http2.OutgoingHttpHeaders {
  if (err === undefined) return { "grpc-status": "0" };
  // Of an error's metadata only the retry hint travels: it is ours (./admission.ts), and the agent reads it.
  const retryAfter = err.metadata.get("retry-after");
  return {
    "grpc-status": String(err.code),
    "grpc-message": encodeURIComponent(err.rawMessage),
    ...(retryAfter !== null ? { "retry-after": retryAfter } : {}),
  };
}

/**
 * Serves one Session call on its HTTP/2 stream: length-prefixed messages in, messages out, the
 * status as trailers (or, when it fails before any message, in a trailers-only response).
 */
export function serveGrpcSession(
  deps: SessionDeps,
  stream: http2.ServerHttp2Stream,
  headers: http2.IncomingHttpHeaders,
  log: Logger,
): void {
  const correlationId = correlationIdFrom(headers[correlationHeader]);
  const callLog = log.child({ correlationId });
  let responded = false;
  let trailers: http2.OutgoingHttpHeaders | undefined;
  // The response is complete. A peer that never half-closes would hold the stream for the life of
  // its connection, so it is reset without error (RST_STREAM NO_ERROR, as HTTP/2 8.1 allows), but
  // only after a grace: a reset right behind the trailers can overtake them at the client.
  const release = () => {
    setTimeout(() => {
      if (!stream.closed) stream.close(http2.constants.NGHTTP2_NO_ERROR);
    }, releaseAfterMs).unref();
  };
  stream.on("wantTrailers", () => {
    stream.sendTrailers(trailers ?? trailersOf(undefined));
    release();
  });
  stream.on("error", () => undefined);

  const end = (failure: unknown) => {
    if (trailers !== undefined) return;
    const {
      error: err,
      level,
      detail,
    } = failure === undefined ? { error: undefined, level: "debug" as const } : publicError(failure, correlationId);
    trailers = trailersOf(err);
    // A stream that is already gone (the agent left) has no one to tell and nothing to log.
    if (stream.destroyed || stream.closed) return;
    if (err !== undefined) {
      const line = {
        method: "Session",
        path: sessionPath,
        code: codeName(err.code),
        message: err.rawMessage,
        ...(detail ? { err: detail } : {}),
      };
      callLog[level](line, level === "error" ? "rpc failed" : "rpc refused");
    }
    if (!responded) {
      // Trailers-only response: the status travels in the headers.
      stream.respond(
        { ":status": 200, "content-type": "application/grpc+proto", [correlationHeader]: correlationId, ...trailers },
        { endStream: true },
      );
      release();
      return;
    }
    stream.end();
  };

  /** Writes one encoded message. An agent that stops reading stops being read: its own messages wait in flow control. */
  const write = (message: Uint8Array) => {
    if (stream.destroyed) return;
    if (!responded) {
      responded = true;
      stream.respond(
        { ":status": 200, "content-type": "application/grpc+proto", [correlationHeader]: correlationId },
        { waitForTrailers: true },
      );
    }
    if (!stream.write(frame(message)) && !stream.isPaused()) {
      stream.pause();
      stream.once("drain", () => stream.resume());
    }
  };

  let session: AgentSession;
  try {
    refuseServiceKeyElsewhere(headers.authorization ?? null);
    const identity = presentedIdentity(peerOf(stream.session!.socket as TLSSocket));
    session = new AgentSession(
      deps,
      identity,
      { correlationId, log: callLog, certificate: undefined, certificateError: undefined },
      { send: (message) => write(toBinary(SessionResponseSchema, message)), sendEncoded: write, end },
    );
  } catch (err) {
    end(err);
    return;
  }

  const reader = new FrameReader();
  stream.on("data", (chunk: Buffer) => {
    if (trailers !== undefined) return; // ended: what the agent still sends is not read
    try {
      for (const bytes of reader.push(chunk)) {
        const heartbeat = plainHeartbeatId(bytes);
        if (heartbeat !== undefined) session.receiveHeartbeat(heartbeat);
        else session.receive(fromBinary(SessionRequestSchema, bytes, { readUnknownFields: false }));
      }
    } catch (err) {
      session.close(err instanceof ConnectError ? err : new ConnectError("malformed message", Code.InvalidArgument));
    }
  });
  stream.on("end", () => (reader.empty ? session.endInput() : session.close(new ConnectError("truncated message", Code.InvalidArgument))));
  stream.on("close", () => session.close(new ConnectError("stream closed", Code.Canceled)));
}
