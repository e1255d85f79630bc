// What a Session stream's failure is, as a status, pure: the codes connect-node gives the same
// failures (its node-error.ts, which it does not export), so the run loop's backoff, refusal
// advice and metrics read the hand-framed Session (./grpc-session.ts) as they read Connect's.
import http2 from "node:http2";
import { Code, ConnectError } from "@connectrpc/connect";

const h2 = http2.constants;

/** Node's error codes, anywhere in the cause chain, and the status each means. */
const nodeCodes: [Code, readonly string[]][] = [
  // Our own write racing the server's end of the stream: the server's status is what counts.
  [Code.Aborted, ["ERR_STREAM_WRITE_AFTER_END"]],
  [Code.Aborted, ["ERR_STREAM_DESTROYED", "ERR_HTTP2_INVALID_STREAM", "ECONNRESET"]],
  [Code.Unavailable, ["ETIMEDOUT", "ENOTFOUND", "EAI_AGAIN", "ECONNREFUSED"]],
];

/** A Node error (or anything thrown) as a ConnectError, keeping it as the cause. */
export function errorOfNodeReason(reason: unknown): ConnectError {
  if (reason instanceof ConnectError) return reason;
  const codes = new Set<string>();
  const seen = new Set<unknown>();
  for (let e: unknown = reason; e instanceof Error && !seen.has(e); e = e.cause) {
    seen.add(e);
    const code = (e as NodeJS.ErrnoException).code;
    if (typeof code === "string") codes.add(code);
  }
  const code = nodeCodes.find(([, names]) => names.some((n) => codes.has(n)))?.[0] ?? Code.Internal;
  const ce = ConnectError.from(reason, code);
  if (ce !== reason) ce.cause = reason;
  return ce;
}

const resetCodes = new Map<number, [name: string, code: Code]>([
  [h2.NGHTTP2_PROTOCOL_ERROR, ["PROTOCOL_ERROR", Code.Internal]],
  [h2.NGHTTP2_INTERNAL_ERROR, ["INTERNAL_ERROR", Code.Internal]],
  [h2.NGHTTP2_FLOW_CONTROL_ERROR, ["FLOW_CONTROL_ERROR", Code.Internal]],
  [h2.NGHTTP2_SETTINGS_TIMEOUT, ["SETTINGS_TIMEOUT", Code.Internal]],
  [h2.NGHTTP2_FRAME_SIZE_ERROR, ["FRAME_SIZE_ERROR", Code.Internal]],
  [h2.NGHTTP2_COMPRESSION_ERROR, ["COMPRESSION_ERROR", Code.Internal]],
  [h2.NGHTTP2_CONNECT_ERROR, ["CONNECT_ERROR", Code.Internal]],
  [h2.NGHTTP2_REFUSED_STREAM, ["REFUSED_STREAM", Code.Unavailable]],
  [h2.NGHTTP2_CANCEL, ["CANCEL", Code.Canceled]],
  [h2.NGHTTP2_ENHANCE_YOUR_CALM, ["ENHANCE_YOUR_CALM", Code.ResourceExhausted]],
  [h2.NGHTTP2_INADEQUATE_SECURITY, ["INADEQUATE_SECURITY", Code.PermissionDenied]],
  [h2.NGHTTP2_HTTP_1_1_REQUIRED, ["HTTP_1_1_REQUIRED", Code.PermissionDenied]],
]);

/**
 * The error of a stream reset with `rstCode`; undefined for NO_ERROR, and for STREAM_CLOSED, which
 * gRPC does not map (the status, if one came, says how the call ended).
 */
export function errorOfResetCode(rstCode: number | undefined): ConnectError | undefined {
  const known = rstCode === undefined ? undefined : resetCodes.get(rstCode);
  if (known === undefined) return undefined;
  return new ConnectError(`http/2 stream closed with error code ${known[0]} (0x${rstCode!.toString(16)})`, known[1]);
}
