// The Session stream in the gRPC protocol, served on Node's HTTP/2 stream directly. It runs the
// same session logic as the Connect handler (./session.ts); it only replaces Connect's generic
// streaming machinery, which cost about 150 µs and 75 KiB per connection more than this framing
// (bench/heartbeats.ts) and so kept a 2-core server from holding 5,000 agents. gRPC-Web and the
// Connect protocol still reach Session through Connect.
import type http2 from "node:http2";
import { Code, ConnectError } from "@connectrpc/connect";
import { fromBinary, toBinary } from "@bufbuild/protobuf";
import {
  AgentService,
  SessionRequestSchema,
  SessionResponseSchema,
  type SessionRequest,
} from "../../gen/proto/modelforge/agent/v1/agent_pb.js";
import { AsyncQueue } from "../../common/queue.js";
import { codeName } from "../../common/codes.js";
import { withoutCertificate, type Caller } from "../context.js";
import type { Deps } from "../app.js";
import { authorizeNode, presentedIdentity } from "../auth/node.js";
import { openSession } from "./session.js";

export const sessionPath = `/${AgentService.typeName}/${AgentService.method.session.name}`;

/** Session messages are small; anything larger is a broken or hostile peer. */
const maxMessageBytes = 1024 * 1024;

/** Whether this request is a gRPC (not gRPC-Web, not Connect) call of Session with protobuf. */
export function isGrpcSession(headers: http2.IncomingHttpHeaders): boolean {
  if (headers[":path"] !== sessionPath) return false;
  const type = headers["content-type"] ?? "";
  return type === "application/grpc" || type === "application/grpc+proto";
}

/** Splits gRPC length-prefixed messages out of the byte stream. */
export class FrameReader {
  private pending: Buffer | undefined;
  /** Returns the complete messages in `chunk` (with what was left over before). */
  push(chunk: Buffer): Buffer[] {
    let buf = this.pending === undefined ? chunk : Buffer.concat([this.pending, chunk]);
    const out: Buffer[] = [];
    while (buf.length >= 5) {
      if (buf[0] !== 0) throw new ConnectError("compressed messages are not supported", Code.Unimplemented);
      const length = buf.readUInt32BE(1);
      if (length > maxMessageBytes) throw new ConnectError(`message larger than ${maxMessageBytes} bytes`, Code.ResourceExhausted);
      if (buf.length < 5 + length) break;
      out.push(buf.subarray(5, 5 + length));
      buf = buf.subarray(5 + length);
    }
    this.pending = buf.length > 0 ? buf : undefined;
    return out;
  }
  get empty(): boolean {
    return this.pending === undefined;
  }
}

export function frame(message: Uint8Array): Buffer {
  const out = Buffer.allocUnsafe(5 + message.length);
  out[0] = 0;
  out.writeUInt32BE(message.length, 1);
  out.set(message, 5);
  return out;
}

function trailersOf(err: unknown): http2.OutgoingHttpHeaders {
  if (err === undefined) return { "grpc-status": "0" };
  const ce = err instanceof ConnectError ? err : new ConnectError("internal error", Code.Internal);
  return { "grpc-status": String(ce.code), "grpc-message": encodeURIComponent(ce.rawMessage) };
}

/**
 * Serves one Session call. Input is read through the compatibility request (which already listens
 * to the stream); messages go straight to the HTTP/2 stream, and the status goes out as trailers
 * through the compatibility response (which owns the stream's trailer event).
 */
export function serveGrpcSession(
  deps: Deps,
  req: http2.Http2ServerRequest,
  res: http2.Http2ServerResponse,
  caller: Caller,
  correlationId: string,
): void {
  const stream = req.stream;
  const inbound = new AsyncQueue<SessionRequest>();
  const reader = new FrameReader();
  let responded = false;
  let finished = false;
  const finish = (err: unknown) => {
    if (finished) return;
    finished = true;
    inbound.fail(new ConnectError("stream closed", Code.Canceled));
    if (stream.destroyed || stream.closed) return;
    if (err !== undefined) {
      const ce = ConnectError.from(err);
      const line = { method: "Session", path: sessionPath, code: codeName(ce.code), message: ce.rawMessage };
      if (ce.code === Code.Internal || ce.code === Code.Unknown) caller.log.error(line, "rpc failed");
      else caller.log.warn(line, "rpc refused");
    }
    if (!responded) {
      // Trailers-only response: the status travels in the headers.
      stream.respond({ ":status": 200, "content-type": "application/grpc+proto", "x-request-id": correlationId, ...trailersOf(err) }, { endStream: true });
      return;
    }
    res.addTrailers(trailersOf(err));
    stream.end();
  };
  req.on("data", (chunk: Buffer) => {
    try {
      for (const bytes of reader.push(chunk)) inbound.push(fromBinary(SessionRequestSchema, bytes));
    } catch (err) {
      finish(err instanceof ConnectError ? err : new ConnectError("malformed message", Code.InvalidArgument));
    }
  });
  req.on("end", () => (reader.empty ? inbound.end() : finish(new ConnectError("truncated message", Code.InvalidArgument))));
  stream.on("close", () => inbound.fail(new ConnectError("stream closed", Code.Canceled)));
  stream.on("error", () => undefined);

  void (async () => {
    const identity = presentedIdentity(caller);
    const node = await authorizeNode(deps.db.prisma, identity);
    for await (const message of openSession(deps, node, identity, inbound, withoutCertificate(caller))) {
      if (stream.destroyed) break;
      if (!responded) {
        responded = true;
        stream.respond({ ":status": 200, "content-type": "application/grpc+proto", "x-request-id": correlationId }, { waitForTrailers: true });
      }
      stream.write(frame(toBinary(SessionResponseSchema, message)));
    }
  })().then(
    () => finish(undefined),
    (err: unknown) => finish(err),
  );
}
