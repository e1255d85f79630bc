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
import { plainInvokeAnswer } from "./invoke-wire.js";
import { publicError, type PublicError } from "../observability/call-log.js";
import { requestLimitOf } from "../edge/limits.js";
import { restOfMessage } from "../edge/drain.js";
import { FrameReader, frame } from "../../common/grpc-frames.js";

export const sessionPath = `/${AgentService.typeName}/${AgentService.method.session.name}`;

/** How long an ended Session stream waits for the agent to close its side before it is reset. */
const releaseAfterMs = 1_000;

/** Whether this request is a gRPC (not gRPC-Web, not Connect) call of Session with protobuf. */
export function isGrpcSession(headers: http2.IncomingHttpHeaders): boolean {
  if (headers[":path"] !== sessionPath) return false;
  const type = headers["content-type"] ?? "";
  return type === "application/grpc" || type === "application/grpc+proto";
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
  stream.on("wantTrailers", () => {
    stream.sendTrailers(trailers ?? trailersOf(undefined));
    releaseLater(stream);
  });
  stream.on("error", () => undefined);

  const end = (failure: unknown) => {
    if (trailers !== undefined) return;
    const outcome = failure === undefined ? undefined : publicError(failure, correlationId);
    trailers = trailersOf(outcome?.error);
    // A stream that is already gone (the agent left) has no one to tell and nothing to log.
    if (stream.destroyed || stream.closed) return;
    if (outcome !== undefined) logEnd(callLog, outcome);
    if (!responded) {
      // Trailers-only response: the status travels in the headers.
      respond(stream, correlationId, trailers, { endStream: true });
      releaseLater(stream);
      return;
    }
    stream.end();
  };

  /** Writes one encoded message. An agent that stops reading stops being read: its own messages wait in flow control. */
  const write = (message: Uint8Array) => {
    if (stream.destroyed) return;
    if (!responded) {
      responded = true;
      respond(stream, correlationId, {}, { waitForTrailers: true });
    }
    if (!stream.write(frame(message)) && !stream.isPaused()) {
      stream.pause();
      stream.once("drain", () => stream.resume());
    }
  };

  const reader = new FrameReader(sessionPath, requestLimitOf(sessionPath, "application/grpc").bytes);
  // An error answered while the agent is partway through a message waits for the rest of it
  // (`need` bytes, or a whole first message when undefined): an agent on node:http2 holding it
  // unsent would refuse that answer and every later one on its connection (../edge/drain.ts).
  let ending = false;
  const endAfterMessage = (failure: unknown, need: number | undefined) => {
    if (ending) return;
    if (failure === undefined || need === 0) return end(failure);
    ending = true;
    void restOfMessage(stream, need).then(() => end(failure));
  };

  let session: AgentSession;
  try {
    refuseServiceKeyElsewhere(headers.authorization ?? null);
    const identity = presentedIdentity(peerOf(stream.session!.socket as TLSSocket));
    session = new AgentSession(
      deps,
      identity,
      { correlationId, log: callLog, certificate: undefined, certificateError: undefined },
      {
        send: (message) => write(toBinary(SessionResponseSchema, message)),
        sendEncoded: write,
        end: (failure) => endAfterMessage(failure, reader.unfinished),
      },
    );
  } catch (err) {
    endAfterMessage(err, undefined);
    return;
  }

  readMessages(stream, reader, session, () => trailers !== undefined || ending);
}

/**
 * The response is complete. A peer that never half-closes would hold the stream for the life of
 * its connection, so it is reset without error (RST_STREAM NO_ERROR, as HTTP/2 8.1 allows), but
 * only after a grace: a reset right behind the trailers can overtake them at the client.
 */
function releaseLater(stream: http2.ServerHttp2Stream): void {
  setTimeout(() => {
    if (!stream.closed) stream.close(http2.constants.NGHTTP2_NO_ERROR);
  }, releaseAfterMs).unref();
}

function respond(
  stream: http2.ServerHttp2Stream,
  correlationId: string,
  extra: http2.OutgoingHttpHeaders,
  options: http2.ServerStreamResponseOptions,
): void {
  stream.respond({ ":status": 200, "content-type": "application/grpc+proto", [correlationHeader]: correlationId, ...extra }, options);
}

function logEnd(callLog: Logger, { error, level, detail }: PublicError): void {
  const line = {
    method: "Session",
    path: sessionPath,
    code: codeName(error.code),
    message: error.rawMessage,
    ...(detail ? { err: detail } : {}),
  };
  callLog[level](line, level === "error" ? "rpc failed" : "rpc refused");
}

/** Hands the agent's messages to its session; once `stopped` (the call is ending), what it still sends is not read. */
function readMessages(stream: http2.ServerHttp2Stream, reader: FrameReader, session: AgentSession, stopped: () => boolean): void {
  stream.on("data", (chunk: Buffer) => {
    if (stopped()) return;
    try {
      for (const bytes of reader.push(chunk)) {
        const heartbeat = plainHeartbeatId(bytes);
        if (heartbeat !== undefined) {
          session.receiveHeartbeat(heartbeat);
          continue;
        }
        const answer = plainInvokeAnswer(bytes);
        if (answer !== undefined) session.receiveInvokeAnswer(answer);
        else session.receive(fromBinary(SessionRequestSchema, bytes, { readUnknownFields: false }));
      }
    } catch (err) {
      session.close(err instanceof ConnectError ? err : new ConnectError("malformed message", Code.InvalidArgument));
    }
  });
  stream.on("end", () => (reader.empty ? session.endInput() : session.close(new ConnectError("truncated message", Code.InvalidArgument))));
  stream.on("close", () => session.close(new ConnectError("stream closed", Code.Canceled)));
}
