// An oversized request written whole, as client libraries write a unary body, and then a normal
// call on the same HTTP/2 connection. A node:http2 client counts the unsent part of such a body
// against its session memory (10 MB by default): if the server answered before taking it, or reset
// the stream under it, the client refused that answer and every later one on the connection with
// ENHANCE_YOUR_CALM (issue #34). Any service on the port can be tried: the paths, content types
// and headers are the caller's, and so is judging the answers.
import type http2 from "node:http2";
import { call, type Answer, type Body } from "./raw-call.js";

export interface Request {
  path: string;
  contentType: string;
  headers?: Record<string, string>;
  /** For the normal call: its body (an oversized one is made of `bytes` bytes). */
  body?: Body;
  method?: string;
}

/** A body of `bytes` bytes handed to the stream in one write, as a client library does. */
export function writtenWhole(bytes: number, fill = 0x41): Body {
  return { bytes, data: Buffer.alloc(bytes, fill) };
}

/**
 * Sends `oversized` with a body of `bytes` written whole, `times` times in turn, then `normal`, on
 * one session; resolves with every answer (a stream reset without one rejects, naming its code).
 */
export async function oversizedThenNormal(
  session: http2.ClientHttp2Session,
  oversized: Request,
  bytes: number,
  normal: Request,
  times = 1,
): Promise<{ oversized: Answer[]; normal: Answer }> {
  const answers: Answer[] = [];
  for (let i = 0; i < times; i++) {
    answers.push(await call(session, oversized.path, oversized.contentType, writtenWhole(bytes), oversized.headers, oversized.method));
  }
  const after = await call(session, normal.path, normal.contentType, normal.body ?? { bytes: 0 }, normal.headers, normal.method);
  return { oversized: answers, normal: after };
}
