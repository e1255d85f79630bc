// The Session call in the gRPC protocol on node:http2's stream API, framed by hand: the agent's side
// of what server/sessions/session-grpc.ts serves. The connection is still Connect's session manager
// (./transport.ts: connecting, pings, GOAWAY); only the stream is ours. Connect's generic streaming
// took several promises per message each way and waited for each write to be flushed before taking
// the next, and with protobuf-es's reflective encoder was about a fifth of the agent's CPU per
// relayed stream chunk (bench/openai.ts). Answers are encoded by hand (framedAnswer) and
// InvokeStarts read by hand (plainInvokeStart); every other message goes through protobuf-es. The
// status, the errors and their codes are Connect's, read with its own gRPC rules, so the run loop
// cannot tell the two apart (MODELFORGE_AGENT_SESSION_FAST_PATH=off keeps Connect's).
import http2 from "node:http2";
import { Code, ConnectError } from "@connectrpc/connect";
import { validateResponse, validateTrailer } from "@connectrpc/connect/protocol-grpc";
import { fromBinary, toBinary } from "@bufbuild/protobuf";
import {
  AgentService,
  SessionRequestSchema,
  SessionResponseSchema,
  type SessionRequest,
  type SessionResponse,
} from "../../gen/proto/modelforge/agent/v1/agent_pb.js";
import { AsyncQueue } from "../../common/queue.js";
import { onAbort } from "../../common/abort.js";
import { drained } from "../../common/drained.js";
import { FrameReader, frame } from "../../common/grpc-frames.js";
import type { SteadySessionManager } from "../../common/http2-sessions.js";
import { framedAnswer } from "../deployments/invoke-answer.js";
import { plainInvokeStart } from "../deployments/invoke-start.js";
import { agentVersion } from "../version.js";
import { errorOfNodeReason, errorOfResetCode } from "./stream-errors.js";

const sessionPath = `/${AgentService.typeName}/${AgentService.method.session.name}`;

/**
 * The most a server message may hold. The control plane bounds what it sends (an invoke's payload
 * at 4 MiB); this only keeps a broken or hostile peer from making the agent buffer without end.
 */
export const maxResponseBytes = 64 * 1024 * 1024;

const requestHeaders: http2.OutgoingHttpHeaders = {
  "content-type": "application/grpc+proto",
  te: "trailers",
  "user-agent": `modelforge-agent/${agentVersion}`,
};

/** One Session call on `manager`'s connection: `requests` out as they come, the server's messages in. */
export async function* grpcSession(
  manager: SteadySessionManager,
  requests: AsyncIterable<SessionRequest>,
  { signal }: { signal: AbortSignal },
): AsyncIterable<SessionResponse> {
  const responses = new AsyncQueue<SessionResponse>();
  const cancelled = () => ConnectError.from(signal.reason, Code.Canceled);
  if (signal.aborted) throw cancelled();
  const stream = await opened(manager, signal);
  const fail = (err: ConnectError) => {
    responses.fail(err);
    if (!stream.closed) stream.close(err.code === Code.Canceled ? http2.constants.NGHTTP2_CANCEL : http2.constants.NGHTTP2_INTERNAL_ERROR);
  };
  // onAbort, not a listener of our own: an abort between the stream's opening and here still ends it.
  const forgetAbort = onAbort(signal, () => fail(cancelled()));
  readResponses(manager, stream, responses, fail);
  void writeRequests(stream, requests, fail);
  try {
    yield* responses;
  } finally {
    forgetAbort();
    if (!stream.closed) stream.close(http2.constants.NGHTTP2_CANCEL);
  }
}

/** The call's stream, once the connection is up; refused at once when `signal` ends the wait. */
function opened(manager: SteadySessionManager, signal: AbortSignal): Promise<http2.ClientHttp2Stream> {
  return new Promise((resolve, reject) => {
    const forget = onAbort(signal, () => reject(ConnectError.from(signal.reason, Code.Canceled)));
    manager.request("POST", sessionPath, requestHeaders, {}).then(
      (stream) => {
        forget();
        // Aborted while the stream opened: nobody will read it.
        if (signal.aborted) stream.close(http2.constants.NGHTTP2_CANCEL);
        else resolve(stream);
      },
      (err: unknown) => {
        forget();
        reject(err instanceof ConnectError ? err : errorOfNodeReason(err));
      },
    );
  });
}

/** Writes each request as it comes; one the stream cannot take yet waits for it to drain. */
async function writeRequests(
  stream: http2.ClientHttp2Stream,
  requests: AsyncIterable<SessionRequest>,
  fail: (err: ConnectError) => void,
): Promise<void> {
  try {
    for await (const request of requests) {
      if (stream.closed || stream.destroyed) return;
      const bytes = framedAnswer(request) ?? frame(toBinary(SessionRequestSchema, request));
      if (!stream.write(bytes) && !(await drained(stream))) return;
    }
    if (!stream.closed && !stream.destroyed) stream.end();
  } catch (err) {
    fail(err instanceof ConnectError ? err : errorOfNodeReason(err));
  }
}

/**
 * The response: its headers checked as Connect's gRPC client checks them, each message decoded
 * and queued, and at the end the status (in the trailers, or in the headers of a trailers-only
 * answer) read into the end of the queue or its error.
 */
function readResponses(
  manager: SteadySessionManager,
  stream: http2.ClientHttp2Stream,
  responses: AsyncQueue<SessionResponse>,
  fail: (err: ConnectError) => void,
): void {
  const reader = new FrameReader(sessionPath, maxResponseBytes);
  let header: Headers | undefined;
  let trailer: Headers | undefined;
  let refused = false;
  stream.on("response", (headers) => {
    header = webHeaders(headers);
    try {
      const { headerError } = validateResponse(headers[":status"] ?? 0, header);
      if (headerError !== undefined) throw headerError;
    } catch (err) {
      refused = true;
      fail(ConnectError.from(err));
    }
  });
  stream.on("data", (chunk: Buffer) => {
    if (refused) return;
    manager.notifyResponseByteRead(stream);
    try {
      for (const bytes of reader.push(chunk)) responses.push(plainInvokeStart(bytes) ?? fromBinary(SessionResponseSchema, bytes));
    } catch (err) {
      refused = true;
      // The server broke the protocol (a compressed message, bytes that are no message): internal,
      // as Connect's client says; a message over the bound keeps its own code.
      const ce = ConnectError.from(err, Code.Internal);
      fail(ce.code === Code.ResourceExhausted ? ce : new ConnectError(ce.rawMessage, Code.Internal));
    }
  });
  stream.on("trailers", (headers) => {
    trailer = webHeaders(headers);
  });
  stream.on("error", (err) => fail(errorOfNodeReason(err)));
  stream.on("close", () => {
    if (refused) return;
    const reset = errorOfResetCode(stream.rstCode);
    if (reset !== undefined) return fail(reset);
    if (header === undefined) return fail(new ConnectError("stream closed before the response", Code.Unavailable));
    try {
      validateTrailer(trailer ?? new Headers(), header);
    } catch (err) {
      return fail(ConnectError.from(err));
    }
    if (!reader.empty) return fail(new ConnectError("protocol error: incomplete message", Code.Internal));
    responses.end();
  });
}

/** Node's headers as the Headers Connect's rules read, pseudo-headers left out. */
function webHeaders(headers: http2.IncomingHttpHeaders): Headers {
  const out = new Headers();
  for (const [name, value] of Object.entries(headers)) {
    if (name.startsWith(":") || value === undefined) continue;
    if (Array.isArray(value)) for (const v of value) out.append(name, v);
    else out.append(name, String(value));
  }
  return out;
}
