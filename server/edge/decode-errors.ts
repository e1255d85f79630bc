// An undecodable request body (an illegal tag, a truncated field) is the caller's mistake, but
// connect-es answers it with internal ("parse binary: ..."), and for unary calls it decodes the
// body before any interceptor runs, so ./validate.ts cannot see it. This wraps the router's
// handlers once and rewrites exactly that answer to invalid_argument, in each protocol's own
// form: the gRPC trailer, the gRPC-Web trailer frame, or the Connect error body. Every other
// answer passes through untouched. (Streams decode inside the interceptors: see asDecodeError.)
import { Code, ConnectError, type ConnectRouter } from "@connectrpc/connect";
import type { UniversalHandler, UniversalServerResponse } from "@connectrpc/connect/protocol";
import { findTrailerError, setTrailerStatus } from "@connectrpc/connect/protocol-grpc";
import { trailerFlag, trailerParse, trailerSerialize } from "@connectrpc/connect/protocol-grpc-web";
import { codeToHttpStatus, errorFromJsonBytes, errorToJsonBytes } from "@connectrpc/connect/protocol-connect";
import { asDecodeError } from "./validate.js";

/** Call at the end of a ConnectRouter's `routes`: every handler registered so far is wrapped. */
export function undecodableAsInvalidArgument(router: ConnectRouter): void {
  router.handlers.forEach((handler, i) => {
    const wrapped = (req: Parameters<UniversalHandler>[0]) => handler(req).then(remap);
    router.handlers[i] = Object.assign(wrapped, handler);
  });
}

/** The invalid_argument error that replaces `err`, when `err` is connect-es's decode failure. */
function replacement(err: ConnectError | undefined): ConnectError | undefined {
  if (err === undefined) return undefined;
  const mapped = asDecodeError(err);
  return mapped === err ? undefined : (mapped as ConnectError);
}

async function remap(res: UniversalServerResponse): Promise<UniversalServerResponse> {
  const contentType = res.header?.get("content-type") ?? "";
  if (res.trailer !== undefined) {
    // gRPC: a failed unary call has already written its status to the trailer.
    const mapped = replacement(findTrailerError(res.trailer));
    if (mapped !== undefined) setTrailerStatus(res.trailer, mapped);
    return res;
  }
  if (res.status === 500 && contentType.startsWith("application/json") && res.body !== undefined) {
    // Connect unary: the error is the JSON body.
    const bytes = await readAll(res.body);
    let mapped: ConnectError | undefined;
    try {
      mapped = replacement(errorFromJsonBytes(bytes, undefined, new ConnectError("not an error body", Code.Internal)));
    } catch {
      mapped = undefined; // not a Connect error body: leave it alone
    }
    if (mapped === undefined) return { ...res, body: once(bytes) };
    const body = errorToJsonBytes(mapped, {});
    res.header?.set("content-length", String(body.byteLength));
    return { ...res, status: codeToHttpStatus(mapped.code), body: once(body) };
  }
  if (contentType.startsWith("application/grpc-web") && res.body !== undefined) {
    // gRPC-Web: a trailers-only answer is one trailer frame in the body.
    const it = res.body[Symbol.asyncIterator]();
    const first = await it.next();
    if (first.done) return { ...res, body: once() };
    return { ...res, body: prepend(remapTrailerFrame(first.value), it) };
  }
  return res;
}

function remapTrailerFrame(chunk: Uint8Array): Uint8Array {
  if (chunk.byteLength < 5 || chunk[0] !== trailerFlag) return chunk;
  const length = new DataView(chunk.buffer, chunk.byteOffset, chunk.byteLength).getUint32(1);
  if (chunk.byteLength !== 5 + length) return chunk;
  const trailer = trailerParse(chunk.subarray(5));
  const mapped = replacement(findTrailerError(trailer));
  if (mapped === undefined) return chunk;
  setTrailerStatus(trailer, mapped);
  const data = trailerSerialize(trailer);
  const frame = new Uint8Array(5 + data.byteLength);
  frame[0] = trailerFlag;
  new DataView(frame.buffer).setUint32(1, data.byteLength);
  frame.set(data, 5);
  return frame;
}

async function readAll(body: AsyncIterable<Uint8Array>): Promise<Uint8Array> {
  const chunks: Uint8Array[] = [];
  for await (const chunk of body) chunks.push(chunk);
  return Buffer.concat(chunks);
}

async function* once(...chunks: Uint8Array[]): AsyncIterable<Uint8Array> {
  yield* chunks;
}

/** The first chunk, then the rest of the original iterator (return() still reaches it). */
async function* prepend(first: Uint8Array, rest: AsyncIterator<Uint8Array>): AsyncIterable<Uint8Array> {
  yield first;
  yield* { [Symbol.asyncIterator]: () => rest };
}
