// The edge every request passes before the Connect adapter (server/start/listener.ts): it applies
// ./admission.ts and ./limits.ts to the request as it arrives. A refused request is answered by
// Connect itself, in whichever protocol it came (Connect, gRPC, gRPC-Web), because the body the
// adapter reads is replaced by one that fails with the refusal before a byte is used. An admitted
// body is counted as it streams in and refused the moment it passes its limit. Either way the rest
// of the body is read and discarded, within ./drain.ts's bounds, before the answer goes out (why:
// see there), and a request the client is still sending past them is ended once answered.
import type { TLSSocket } from "node:tls";
import type { ConnectError, ConnectRouterOptions } from "@connectrpc/connect";
import { adminTokenHeader } from "../identity/admin-token.js";
import { sessionCookie } from "../identity/operators/authenticate.js";
import type { OperatorKeys } from "../identity/roles.js";
import { peerOf } from "../context.js";
import type { Logger } from "../observability/logger.js";
import { FloodLogger, floodPolicy } from "../observability/flood-log.js";
import { codeName } from "../../common/codes.js";
import { admit, tooLarge } from "./admission.js";
import { largestRequestBytes } from "./limits.js";
import {
  bodyChunks,
  declaredLength,
  discardRest,
  drainBudget,
  drainLimits,
  EnvelopeTracker,
  endUnreadRequestOnceAnswered,
  type NodeRequest,
  type NodeResponse,
} from "./drain.js";
import { headerValue } from "./headers.js";

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

/** `operatorKeys` undefined: the break-glass keys are off. */
export function edgeGuard(operatorKeys: OperatorKeys | undefined, log: Logger): EdgeGuard {
  // Anyone can send refusable requests as fast as the network allows: the first few per window
  // get a line each, the rest one summary line (and no per-request log memory).
  const refusals = new FloodLogger(log, "rpc refused at the edge", floodPolicy);
  return (req, res, correlationId) => {
    const path = (req.url ?? "").split("?", 1)[0]!;
    const contentLength = declaredLength(req);
    const admission = admit(
      {
        path,
        contentType: req.headers["content-type"] ?? "",
        contentLength,
        adminToken: headerValue(req.headers[adminTokenHeader]),
        authorization: headerValue(req.headers.authorization),
        cookie: req.headers.cookie?.includes(`${sessionCookie}=`) === true,
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
      replaceBody(req, checkedBody(req, { check: () => refusal, leftToDrain: (bytes) => drainBudget(contentLength, bytes) }));
      return;
    }
    if (admission.limit.perMessage) {
      // A client stream's messages are bounded by the adapter (readMaxBytes) and, for the gRPC
      // Session, by its own frame reader; its total is not, and it ends between messages without
      // waiting. Base64 text (gRPC-Web text) is not followed: it ends at once.
      const envelopes = new EnvelopeTracker();
      const text = /grpc-web-text/i.test(req.headers["content-type"] ?? "");
      const leftToDrain = () => (envelopes.unfinished > drainLimits.bytes ? 0 : envelopes.unfinished);
      const seen = text ? undefined : (chunk: Buffer) => envelopes.push(chunk);
      replaceBody(req, checkedBody(req, { check: () => undefined, ...(seen ? { seen } : {}), leftToDrain }));
      return;
    }
    const limit = admission.limit.bytes;
    replaceBody(
      req,
      checkedBody(req, {
        check: (bytes) => (bytes > limit ? refused(tooLarge(path, limit)) : undefined),
        leftToDrain: (bytes) => drainBudget(contentLength, bytes),
      }),
    );
  };
}

interface BodyRules {
  /** A refusal, given the bytes read so far (0 before the first chunk). */
  check(bytes: number): ConnectError | undefined;
  /** Sees each chunk handed to the adapter. */
  seen?(chunk: Buffer): void;
  /** Bytes to discard once the adapter stopped reading early, given those it had read. */
  leftToDrain(bytes: number): number;
}

/**
 * The body the adapter reads. However the adapter stops reading (a refusal of `rules`, or its own:
 * readMaxBytes, a bad envelope), the rest is discarded before its answer goes out, as the adapter
 * awaits the generator's return.
 */
function checkedBody(req: NodeRequest, rules: BodyRules): () => AsyncGenerator<Buffer> {
  return async function* () {
    // The adapter stops reading at the first error; destroying the request then would cut the
    // stream before the refusal is sent.
    const chunks = bodyChunks(req);
    let bytes = 0;
    let ended = false;
    try {
      for (;;) {
        const refusal = rules.check(bytes);
        if (refusal !== undefined) throw refusal;
        const next = await chunks.next();
        if (next.done === true) {
          ended = true;
          return;
        }
        bytes += next.value.byteLength;
        // Checked again before the chunk is handed over: it may be the last.
        if (rules.check(bytes) !== undefined) continue;
        rules.seen?.(next.value);
        yield next.value;
      }
    } finally {
      if (!ended) await discardRest(chunks, rules.leftToDrain(bytes));
    }
  };
}

/** The Connect adapter reads a request's body by iterating the request; it gets this body instead. */
function replaceBody(req: NodeRequest, body: () => AsyncGenerator<Buffer>): void {
  Object.defineProperty(req, Symbol.asyncIterator, { value: body, configurable: true });
}
