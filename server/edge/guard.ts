// The edge every request passes before the Connect adapter (server/app.ts): it applies
// ./admission.ts and ./limits.ts to the request as it arrives. A refused request is answered by
// Connect itself, in whichever protocol it came (Connect, gRPC, gRPC-Web), because the body the
// adapter reads is replaced by one that fails with the refusal before a byte is read. An admitted
// body is counted as it streams in and cut off the moment it passes its limit. Once answered, a
// request the client is still sending is ended, so the client stops instead of pushing into a
// stream nobody reads.
import http2 from "node:http2";
import type { IncomingMessage, ServerResponse } from "node:http";
import type { TLSSocket } from "node:tls";
import type { ConnectError, ConnectRouterOptions } from "@connectrpc/connect";
import { adminTokenHeader } from "../identity/admin-token.js";
import type { OperatorKeys } from "../identity/roles.js";
import { peerOf } from "../context.js";
import type { Logger } from "../observability/logger.js";
import { FloodLogger, floodPolicy } from "../observability/flood-log.js";
import { codeName } from "../../common/codes.js";
import { admit, tooLarge } from "./admission.js";
import { largestRequestBytes } from "./limits.js";

type NodeRequest = http2.Http2ServerRequest | IncomingMessage;
type NodeResponse = http2.Http2ServerResponse | ServerResponse;

/**
 * For every Connect adapter: the adapter's own limit on a message, as a backstop to the edge's
 * per-method ones (it also bounds what a compressed message may inflate to), unknown fields
 * skipped rather than kept, so a body of them costs no objects, and no compression of answers
 * under 16 KiB: Connect's default (1 KiB) gzipped every enrollment's certificate, a fresh zlib
 * stream per call whose CPU cost more than the few bytes it saved (bench/enroll.ts).
 */
export const edgeAdapterOptions = {
  readMaxBytes: largestRequestBytes,
  compressMinBytes: 16 * 1024,
  binaryOptions: { readUnknownFields: false },
} satisfies Partial<ConnectRouterOptions>;

export type EdgeGuard = (req: NodeRequest, res: NodeResponse, correlationId: string) => void;

export function edgeGuard(operatorKeys: OperatorKeys, log: Logger): EdgeGuard {
  // Anyone can send refusable requests as fast as the network allows: the first few per window
  // get a line each, the rest one summary line (and no per-request log memory).
  const refusals = new FloodLogger(log, "rpc refused at the edge", floodPolicy);
  return (req, res, correlationId) => {
    const path = (req.url ?? "").split("?", 1)[0]!;
    const declared = req.headers["content-length"];
    const admission = admit(
      {
        path,
        contentType: req.headers["content-type"] ?? "",
        contentLength: declared === undefined ? undefined : Number(declared),
        adminToken: single(req.headers[adminTokenHeader]),
        authorization: single(req.headers.authorization),
        peer: () => peerOf(req.socket as TLSSocket),
      },
      operatorKeys,
    );
    endUnreadRequestOnceAnswered(req, res);
    const refused = (refusal: ConnectError) => {
      refusals.warn(req.socket.remoteAddress ?? "unknown", {
        correlationId,
        path,
        code: codeName(refusal.code),
        message: refusal.rawMessage,
      });
      // HTTP/1.1 has no way to stop one request's body but to close its connection.
      if (!("stream" in req) && !res.headersSent) res.setHeader("connection", "close");
      return refusal;
    };
    if (!admission.admitted) {
      const refusal = refused(admission.refusal);
      replaceBody(req, async function* () {
        // A body that fails before its first chunk: the adapter answers with the refusal.
        yield* [];
        throw refusal;
      });
      return;
    }
    // A client stream's messages are bounded by the adapter (readMaxBytes) and, for the gRPC
    // Session, by its own frame reader; its total is not.
    if (admission.limit.perMessage) return;
    const limit = admission.limit.bytes;
    replaceBody(req, async function* () {
      let bytes = 0;
      // The adapter stops reading at the first error; destroying the request then would cut the
      // stream before the refusal is sent.
      for await (const chunk of req.iterator({ destroyOnReturn: false }) as AsyncIterable<Buffer>) {
        bytes += chunk.byteLength;
        if (bytes > limit) throw refused(tooLarge(path, limit));
        yield chunk;
      }
    });
  };
}

function single(value: string | string[] | undefined): string | undefined {
  return Array.isArray(value) ? value[0] : value;
}

/** The Connect adapter reads a request's body by iterating the request; it gets this body instead. */
function replaceBody(req: NodeRequest, body: () => AsyncGenerator<Buffer>): void {
  Object.defineProperty(req, Symbol.asyncIterator, { value: body, configurable: true });
}

/**
 * HTTP/2 allows a server that has sent its complete response to end the rest of the request with
 * RST_STREAM NO_ERROR. The reset waits a turn of the event loop after the trailers are handed
 * over: sent from within the trailers callback, it overtakes them.
 */
function endUnreadRequestOnceAnswered(req: NodeRequest, res: NodeResponse): void {
  if (!("stream" in req)) return;
  const stream = req.stream;
  const end = () =>
    setImmediate(() => {
      if (!req.complete && !stream.closed) stream.close(http2.constants.NGHTTP2_NO_ERROR);
    });
  stream.once("wantTrailers", end);
  // A trailers-only answer (gRPC's refusal before any message) has no trailers callback.
  res.once("finish", end);
}
