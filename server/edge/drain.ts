// What is left of a request body the server will not use, read and thrown away before the answer.
//
// Why not reset the stream at once: a node:http2 client counts the body it has queued but not yet
// sent against its session memory (maxSessionMemory, 10 MB by default), and when the stream is
// reset it drops that queue without giving the count back. Its session then refuses every later
// answer's headers with RST_STREAM ENHANCE_YOUR_CALM: one body written whole and refused (12 MiB,
// or two of 6 MiB) poisoned the client's whole connection, every tenant behind a proxy on it
// included. An answer that comes while the queue is still over the limit is refused the same way,
// so the body is read to its end first: the client's queue empties as it is sent, and the stream
// closes cleanly. Reading is bounded, so a client streaming without end still gets its reset.
import http2 from "node:http2";
import type { IncomingMessage, ServerResponse } from "node:http";
import type { Readable } from "node:stream";

export type NodeRequest = http2.Http2ServerRequest | IncomingMessage;
export type NodeResponse = http2.Http2ServerResponse | ServerResponse;

const MiB = 1024 * 1024;

export interface DrainLimits {
  /** Most bytes of a body the server reads to let its client finish sending. */
  bytes: number;
  /** A client that sends nothing for this long is not finishing: answer it without waiting. */
  quietMs: number;
}

/** Past Node's default session memory (10 MB) with room to spare, as bodies over it are the ones reset. */
export const drainLimits: DrainLimits = { bytes: 16 * MiB, quietMs: 2_000 };

/**
 * How many more bytes to read before answering, given the declared content-length (if any) and
 * the bytes already read: none when the declaration says the body will not fit.
 */
export function drainBudget(declared: number | undefined, read: number, limits: DrainLimits = drainLimits): number {
  if (declared !== undefined && declared > limits.bytes) return 0;
  return Math.max(0, limits.bytes - read);
}

/**
 * Reads and discards the rest of a body, up to `budget` bytes; resolves true if the client ended
 * it, false if the budget ran out or the client went quiet (the stream is reset after the answer).
 */
export async function discardRest(chunks: AsyncIterator<Buffer>, budget: number, quietMs = drainLimits.quietMs): Promise<boolean> {
  let left = budget;
  while (left > 0) {
    let timer: NodeJS.Timeout | undefined;
    const quiet = new Promise<"quiet">((resolve) => {
      timer = setTimeout(() => resolve("quiet"), quietMs);
    });
    const next = chunks.next();
    // A read still pending when the stream is reset settles then; nobody waits for it.
    next.catch(() => undefined);
    const got = await Promise.race([next, quiet]).catch(() => ({ done: true, value: undefined }) as const);
    clearTimeout(timer);
    if (got === "quiet") return false;
    if (got.done === true) return true;
    left -= got.value.byteLength;
  }
  return false;
}

/** The declared content-length of a request, if any. */
export function declaredLength(req: NodeRequest): number | undefined {
  const declared = req.headers["content-length"];
  return declared === undefined ? undefined : Number(declared);
}

/** The rest of a request's body as it arrives; reading it does not destroy the request. */
export function bodyChunks(req: NodeRequest): AsyncIterator<Buffer> {
  return (req.iterator({ destroyOnReturn: false }) as AsyncIterable<Buffer>)[Symbol.asyncIterator]();
}

/** For answers that need no body (the console's files): `answer` runs once the body is discarded. */
export function answerAfterBody(req: NodeRequest, res: NodeResponse, answer: () => void): void {
  endUnreadRequestOnceAnswered(req, res);
  void discardRest(bodyChunks(req), drainBudget(declaredLength(req), 0)).then(() => {
    const gone = "stream" in res ? res.stream.destroyed : res.destroyed;
    if (!gone) answer();
  });
}

/**
 * HTTP/2 allows a server that has sent its complete response to end the rest of the request with
 * RST_STREAM NO_ERROR: what a client still sends past the drain's bounds. The reset waits a turn
 * of the event loop after the trailers are handed over: sent from within the trailers callback,
 * it overtakes them.
 */
export function endUnreadRequestOnceAnswered(req: NodeRequest, res: NodeResponse): void {
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

/**
 * For a stream of gRPC messages answered with an error while its client is partway through one
 * (the Session): resolves once the rest of that message has arrived and been discarded, `need`
 * bytes more or, when unknown, one whole message read from its 5-byte prefix on. It does not wait
 * for a message over the drain's bound, nor past a quiet spell, nor past the stream's end.
 */
export function restOfMessage(stream: Readable, need: number | undefined, limits: DrainLimits = drainLimits): Promise<void> {
  return new Promise((resolve) => {
    let left = need;
    let prefix = Buffer.alloc(0);
    let timer: NodeJS.Timeout | undefined;
    const done = () => {
      clearTimeout(timer);
      stream.off("data", onData).off("end", done).off("close", done);
      resolve();
    };
    const quiet = () => {
      clearTimeout(timer);
      timer = setTimeout(done, limits.quietMs);
    };
    const onData = (chunk: Buffer) => {
      let rest = chunk;
      if (left === undefined) {
        const take = Math.min(5 - prefix.length, rest.length);
        prefix = Buffer.concat([prefix, rest.subarray(0, take)]);
        rest = rest.subarray(take);
        if (prefix.length < 5) return quiet();
        left = prefix.readUInt32BE(1);
        if (left > limits.bytes) return done();
      }
      left -= rest.length;
      if (left <= 0) return done();
      quiet();
    };
    if (stream.readableEnded || stream.destroyed) return resolve();
    if (left !== undefined && (left <= 0 || left > limits.bytes)) return resolve();
    stream.on("data", onData).once("end", done).once("close", done);
    quiet();
  });
}

/**
 * Follows the 5-byte envelopes (flags, then the length) of a stream of messages as its bytes pass,
 * so that a call ended partway through one knows how much of it is still to come.
 */
export class EnvelopeTracker {
  private prefix: number[] = [];
  private left = 0;
  push(chunk: Buffer): void {
    let at = 0;
    while (at < chunk.length) {
      if (this.left > 0) {
        const take = Math.min(this.left, chunk.length - at);
        this.left -= take;
        at += take;
        continue;
      }
      this.prefix.push(chunk[at++]!);
      if (this.prefix.length === 5) {
        this.left = Buffer.from(this.prefix).readUInt32BE(1);
        this.prefix = [];
      }
    }
  }
  /** Bytes still to come of the message begun: 0 between messages (or with only part of its prefix in). */
  get unfinished(): number {
    return this.left;
  }
}
