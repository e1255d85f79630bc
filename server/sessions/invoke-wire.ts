// The invoke relay's two Session messages in wire form: the InvokeStart the server pushes, and the
// InvokeAnswer an agent sends back for each whole answer or stream chunk. Every token a runtime
// produces crosses here, and protobuf-es's reflective decode, the edge's walk of the decoded
// message and the reflective encode were the largest share of what a relayed chunk cost the
// server (bench/openai.ts, BENCH_CPU_PROF). Like ./heartbeat-wire.ts, these read and write the
// very bytes protobuf-es does for the one shape they know: an answer of any other shape (an
// error, a field twice, an unknown field, a content type that is not short printable ASCII, a
// value past 2^49) is left to the general path, decoder and edge check included.
//
//   SessionRequest   { message_id = 1 (varint); invoke_answer = 9 (InvokeAnswer) }
//   InvokeAnswer     { invoke_id = 1; content_type = 2; payload = 3; done = 4; error = 5; revision = 6 }
//   SessionResponse  { invoke = 7 (InvokeStart) }
//   InvokeStart      { invoke_id = 1; invoke = 2 (DeploymentInvoke); api = 3; stream = 4 }
//   DeploymentInvoke { deployment_id = 1; request_id = 2; content_type = 3; payload = 4;
//                      timeout = 5 (Duration); revision = 6; replica = 7 (UInt32Value) }
import { create } from "@bufbuild/protobuf";
import { durationFromMs } from "@bufbuild/protobuf/wkt";
import {
  InvokeAnswerSchema,
  SessionResponseSchema,
  type InvokeAnswer,
  type SessionRequest,
  type SessionResponse,
} from "../../gen/proto/modelforge/agent/v1/agent_pb.js";
import type { InvokePush } from "../node-sessions.js";
import { boundsOf } from "../edge/bounds.js";
import { printableAscii, pushField, pushMessage, pushString, pushVarint, readVarint } from "../../common/protobuf-wire.js";

const contentTypeBound = boundsOf(InvokeAnswerSchema.field.contentType).string?.maxBytes;
const payloadBound = boundsOf(InvokeAnswerSchema.field.payload).bytesMax;
if (contentTypeBound === undefined || payloadBound === undefined) {
  throw new Error("InvokeAnswer.content_type or payload has no bound in proto/");
}
const maxContentTypeBytes = contentTypeBound;
const maxPayloadBytes = Number(payloadBound);

const empty = new Uint8Array(0);

/**
 * An encoded SessionRequest that is an invoke answer without an error, as protobuf-es would decode
 * it (one the edge check passes); undefined when it is anything else.
 */
export function plainInvokeAnswer(bytes: Uint8Array): SessionRequest | undefined {
  const end = bytes.length;
  const cursor = { at: 0 };
  let messageId = 0;
  let body: InvokeAnswer | undefined;
  let seen = 0;
  while (cursor.at < end) {
    const t = bytes[cursor.at++]!;
    if (t === 0x08 && !(seen & 1)) {
      messageId = readVarint(bytes, cursor, end);
      if (messageId < 0) return undefined;
      seen |= 1;
    } else if (t === 0x4a && !(seen & 2)) {
      const n = readVarint(bytes, cursor, end);
      if (n < 0 || cursor.at + n > end) return undefined;
      body = plainAnswer(bytes, cursor.at, cursor.at + n);
      if (body === undefined) return undefined;
      cursor.at += n;
      seen |= 2;
    } else return undefined;
  }
  if (body === undefined) return undefined;
  return { $typeName: "modelforge.agent.v1.SessionRequest", messageId: BigInt(messageId), message: { case: "invokeAnswer", value: body } };
}

function plainAnswer(bytes: Uint8Array, from: number, end: number): InvokeAnswer | undefined {
  const cursor = { at: from };
  let invokeId = 0;
  let contentType = "";
  let payload: Uint8Array = empty;
  let done = false;
  let revision = 0;
  let seen = 0;
  while (cursor.at < end) {
    const t = bytes[cursor.at++]!;
    const bit = t === 0x08 ? 1 : t === 0x12 ? 2 : t === 0x1a ? 4 : t === 0x20 ? 8 : t === 0x30 ? 16 : 0;
    if (bit === 0 || seen & bit) return undefined;
    seen |= bit;
    const n = readVarint(bytes, cursor, end);
    if (n < 0) return undefined;
    if (bit === 1) invokeId = n;
    else if (bit === 16) revision = n;
    else if (bit === 8) {
      if (n > 1) return undefined;
      done = n === 1;
    } else {
      const at = cursor.at;
      if (at + n > end) return undefined;
      cursor.at = at + n;
      if (bit === 4) {
        if (n > maxPayloadBytes) return undefined;
        payload = bytes.subarray(at, at + n);
      } else {
        if (n > maxContentTypeBytes) return undefined;
        const known = contentTypeAt(bytes, at, at + n);
        if (known === undefined) return undefined;
        contentType = known;
      }
    }
  }
  return {
    $typeName: "modelforge.agent.v1.InvokeAnswer",
    invokeId: BigInt(invokeId),
    contentType,
    payload,
    done,
    error: undefined,
    revision: BigInt(revision),
  };
}

/** The content type last read: an agent sends the same one on every chunk, so it is compared, not decoded again. */
let lastContentType = { bytes: new Uint8Array(0), text: "" };

/** The printable ASCII content type at [from, to), or undefined when it is not such. */
function contentTypeAt(bytes: Uint8Array, from: number, to: number): string | undefined {
  const last = lastContentType.bytes;
  if (to - from === last.length) {
    let i = 0;
    while (i < last.length && bytes[from + i] === last[i]) i++;
    if (i === last.length) return lastContentType.text;
  }
  const text = printableAscii(bytes, from, to);
  if (text === undefined) return undefined;
  lastContentType = { bytes: bytes.slice(from, to), text };
  return text;
}

/** The InvokeStart as a message, for a transport that encodes its own (the Connect Session). */
export function invokeStartMessage(p: InvokePush): SessionResponse {
  return create(SessionResponseSchema, {
    message: {
      case: "invoke",
      value: {
        invokeId: p.invokeId,
        invoke: {
          deploymentId: p.deploymentId,
          requestId: p.requestId,
          contentType: p.contentType,
          payload: p.payload,
          timeout: durationFromMs(p.timeoutMs),
          revision: p.revision,
          replica: p.replica,
        },
        api: p.api,
        stream: p.stream,
      },
    },
  });
}

/** The same InvokeStart encoded as protobuf-es encodes it (fields in number order, zero scalars left out). */
export function invokeStartBytes(p: InvokePush): Uint8Array {
  const head: number[] = [];
  pushString(head, 0x0a, p.deploymentId);
  pushString(head, 0x12, p.requestId);
  pushString(head, 0x1a, p.contentType);
  if (p.payload.length > 0) {
    head.push(0x22);
    pushVarint(head, p.payload.length);
  }
  const tail: number[] = [];
  const timeout = durationFromMs(p.timeoutMs);
  const duration: number[] = [];
  if (timeout.seconds !== 0n) pushField(duration, 0x08, timeout.seconds);
  if (timeout.nanos !== 0) pushField(duration, 0x10, timeout.nanos);
  pushMessage(tail, 0x2a, duration);
  if (p.revision !== 0n) pushField(tail, 0x30, p.revision);
  const replica: number[] = [];
  if (p.replica !== 0) pushField(replica, 0x08, p.replica);
  pushMessage(tail, 0x3a, replica);
  const invokeLength = head.length + p.payload.length + tail.length;

  const start: number[] = [];
  if (p.invokeId !== 0n) pushField(start, 0x08, p.invokeId);
  start.push(0x12);
  pushVarint(start, invokeLength);
  const end: number[] = [];
  if (p.api !== 0) pushField(end, 0x18, p.api);
  if (p.stream) end.push(0x20, 0x01);
  const startLength = start.length + invokeLength + end.length;

  const prefix: number[] = [0x3a];
  pushVarint(prefix, startLength);
  const out = Buffer.allocUnsafe(prefix.length + startLength);
  let at = 0;
  for (const part of [prefix, start, head]) {
    out.set(part, at);
    at += part.length;
  }
  out.set(p.payload, at);
  at += p.payload.length;
  out.set(tail, at);
  out.set(end, at + tail.length);
  return out;
}
