// Hand-written HTTP/2 calls in any of the port's protocols (Connect, gRPC, gRPC-Web), so a test can
// stream a body of any size without ever holding it, declare what it likes, and read the answer in
// whichever protocol it came.
import http2 from "node:http2";
import type { Code } from "@connectrpc/connect";
import { codeName } from "../../common/codes.js";

/** `identity`: a client certificate and its key, for the calls that take one. */
export function connect(url: string, ca: string, identity?: { cert: string; key: string }): Promise<http2.ClientHttp2Session> {
  return new Promise((resolve, reject) => {
    const s = http2.connect(url, { ca, ...identity });
    s.once("connect", () => resolve(s));
    s.once("error", reject);
  });
}

export interface Answer {
  code: string;
  message: string;
  /** From the request to the answer. */
  ms: number;
  /** Body bytes the client managed to hand to its stream. */
  sent: number;
  /** Whether the server closed the stream (so the client could stop sending). */
  closed: Promise<boolean>;
}

export interface Body {
  /** Bytes of message to send (after the 5-byte envelope, for gRPC and gRPC-Web). */
  bytes: number;
  /** Byte the message is made of. */
  fill?: number;
  /** The message itself, for a small valid one. */
  data?: Buffer;
  /** A content-length to declare. */
  declared?: number;
  /** Leave the request open after the bytes, as a client still sending would. */
  open?: boolean;
}

const chunk = (fill: number) => Buffer.alloc(64 * 1024, fill);
export const emptyJson: Body = { bytes: 2, data: Buffer.from("{}") };

/**
 * One call, written by hand so the body can be streamed without ever being held whole, and so
 * the answer is read in whichever protocol it came.
 */
export function call(
  session: http2.ClientHttp2Session,
  path: string,
  contentType: string,
  body: Body,
  headers: Record<string, string> = {},
  method = "POST",
): Promise<Answer> {
  const started = performance.now();
  const enveloped = contentType.startsWith("application/grpc");
  const req = session.request({
    ":method": method,
    ":path": path,
    "content-type": contentType,
    ...(contentType === "application/grpc" ? { te: "trailers" } : {}),
    ...(body.declared !== undefined ? { "content-length": String(body.declared) } : {}),
    ...headers,
  });
  req.on("error", () => undefined);
  let sent = 0;
  let answered = false;
  const piece = body.data ?? chunk(body.fill ?? 0x41);
  const pump = () => {
    while (!answered && !req.closed && !req.destroyed && sent < body.bytes) {
      const n = Math.min(piece.length, body.bytes - sent);
      sent += n;
      if (!req.write(n === piece.length ? piece : piece.subarray(0, n))) return void req.once("drain", pump);
    }
    if (sent >= body.bytes && !req.closed && body.open !== true) req.end();
  };
  if (enveloped) {
    const prefix = Buffer.alloc(5);
    prefix.writeUInt32BE(body.bytes, 1);
    req.write(prefix);
  }
  pump();
  const closed = new Promise<boolean>((resolve) => {
    const timer = setTimeout(() => resolve(false), 5_000);
    const done = () => {
      clearTimeout(timer);
      resolve(true);
    };
    req.on("aborted", done);
    req.on("close", done);
  });
  return new Promise((resolve, reject) => {
    let status = 0;
    let head: http2.IncomingHttpHeaders = {};
    let tail: http2.IncomingHttpHeaders = {};
    const data: Buffer[] = [];
    req.on("response", (h) => {
      head = h;
      status = Number(h[":status"]);
    });
    req.on("data", (d: Buffer) => data.push(d));
    req.on("trailers", (t) => {
      tail = t;
    });
    req.on("end", () => {
      answered = true;
      const ms = performance.now() - started;
      const text = Buffer.concat(data);
      try {
        resolve({ ...decode(contentType, status, { ...head, ...tail }, text), ms, sent, closed });
      } catch (err) {
        reject(err);
      }
    });
    req.on("close", () => {
      if (!answered) reject(new Error(`stream closed without an answer (rst ${req.rstCode}) after ${sent} bytes`));
    });
  });
}

function decode(contentType: string, status: number, headers: http2.IncomingHttpHeaders, body: Buffer): { code: string; message: string } {
  const grpc = (h: Record<string, unknown>) => ({
    code: Number(h["grpc-status"]) === 0 ? "ok" : codeName(Number(h["grpc-status"]) as Code),
    message: decodeURIComponent(String(h["grpc-message"] ?? "")),
  });
  if (contentType === "application/grpc") {
    if (headers["grpc-status"] === undefined) throw new Error(`no grpc-status (HTTP ${status})`);
    return grpc(headers);
  }
  if (contentType.startsWith("application/grpc-web")) {
    if (headers["grpc-status"] !== undefined) return grpc(headers);
    // The status travels in a final frame whose flag byte has the high bit set.
    let at = 0;
    while (at + 5 <= body.length) {
      const length = body.readUInt32BE(at + 1);
      if ((body[at]! & 0x80) !== 0) {
        const fields = Object.fromEntries(
          body
            .subarray(at + 5, at + 5 + length)
            .toString("utf8")
            .split("\r\n")
            .filter(Boolean)
            .map((line) => [line.slice(0, line.indexOf(":")).trim().toLowerCase(), line.slice(line.indexOf(":") + 1).trim()]),
        );
        return grpc(fields);
      }
      at += 5 + length;
    }
    throw new Error(`no gRPC-Web trailer frame (HTTP ${status})`);
  }
  if (status === 200) return { code: "ok", message: "" };
  // Not an RPC (the console's files): the HTTP status is the answer.
  if (!/json|proto/.test(contentType)) return { code: `http ${status}`, message: body.toString("utf8") };
  // Connect's error shape, or OpenAI's ({"error": {...}}) for the OpenAI API.
  const parsed = JSON.parse(body.toString("utf8")) as { code: string; message?: string; error?: { code: string; message?: string } };
  const error = parsed.error ?? parsed;
  return { code: error.code, message: error.message ?? "" };
}
