// A Session stream's failures as statuses (agent/session/stream-errors.ts): the codes connect-node
// gives the same failures, which the run loop's backoff and refusal advice read.
import http2 from "node:http2";
import { describe, expect, it } from "vitest";
import { Code, ConnectError } from "@connectrpc/connect";
import { errorOfNodeReason, errorOfResetCode } from "../../agent/session/stream-errors.js";

const nodeError = (code: string, cause?: Error) => Object.assign(new Error(code, cause ? { cause } : {}), { code });
const h2 = http2.constants;

describe("a Session stream's failure as a status", () => {
  it.each<[string, unknown, Code]>([
    ["a refused connection", nodeError("ECONNREFUSED"), Code.Unavailable],
    ["a name that does not resolve", nodeError("ENOTFOUND"), Code.Unavailable],
    ["a timed-out connect, under a wrapper", new Error("connect failed", { cause: nodeError("ETIMEDOUT") }), Code.Unavailable],
    ["a reset connection", nodeError("ECONNRESET"), Code.Aborted],
    ["a destroyed stream", nodeError("ERR_STREAM_DESTROYED"), Code.Aborted],
    ["a write after the end", nodeError("ERR_STREAM_WRITE_AFTER_END"), Code.Aborted],
    ["an untrusted server certificate", nodeError("SELF_SIGNED_CERT_IN_CHAIN"), Code.Internal],
    ["anything else", new Error("odd"), Code.Internal],
  ])("%s", (_, reason, code) => {
    const ce = errorOfNodeReason(reason);
    expect(Code[ce.code]).toBe(Code[code]);
    // The refusal advice walks the cause chain for Node's certificate codes.
    expect(ce.cause).toBe(reason);
  });

  it("keeps a ConnectError as it is", () => {
    const ce = new ConnectError("x", Code.Unauthenticated);
    expect(errorOfNodeReason(ce)).toBe(ce);
  });

  it("a cause chain that loops ends", () => {
    const a = new Error("a");
    const b = new Error("b", { cause: a });
    a.cause = b;
    expect(errorOfNodeReason(a).code).toBe(Code.Internal);
  });

  it.each<[number | undefined, Code | undefined]>([
    [undefined, undefined],
    [h2.NGHTTP2_NO_ERROR, undefined],
    [h2.NGHTTP2_STREAM_CLOSED, undefined],
    [h2.NGHTTP2_PROTOCOL_ERROR, Code.Internal],
    [h2.NGHTTP2_INTERNAL_ERROR, Code.Internal],
    [h2.NGHTTP2_FLOW_CONTROL_ERROR, Code.Internal],
    [h2.NGHTTP2_REFUSED_STREAM, Code.Unavailable],
    [h2.NGHTTP2_CANCEL, Code.Canceled],
    [h2.NGHTTP2_ENHANCE_YOUR_CALM, Code.ResourceExhausted],
    [h2.NGHTTP2_INADEQUATE_SECURITY, Code.PermissionDenied],
    [h2.NGHTTP2_HTTP_1_1_REQUIRED, Code.PermissionDenied],
  ])("a stream reset with %s", (rst, code) => {
    expect(errorOfResetCode(rst)?.code).toBe(code);
  });

  it("names the reset in its message", () => {
    expect(errorOfResetCode(h2.NGHTTP2_REFUSED_STREAM)?.rawMessage).toBe("http/2 stream closed with error code REFUSED_STREAM (0x7)");
  });
});
