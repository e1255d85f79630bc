// A Session heartbeat in wire form, and the empty reply that acknowledges an invoke answer. Heartbeats are nearly all a fleet sends, and decoding each one
// through protobuf-es's reflection, building the reply and encoding it was a large share of what
// a heartbeat cost the server (bench/heartbeats.ts PROFILE=1: @bufbuild/protobuf was the largest
// package by self time). These read and write the very bytes protobuf-es does, for the one shape
// a heartbeat takes: a message of any other shape (another field, a field twice, a capability
// list, an agent version that is not short printable ASCII, a timestamp near its bounds) is not
// read here and takes the general path, decoder and edge check (../edge/validate.ts) included, so
// the edge refuses exactly what it refused before.
//
//   SessionRequest   { message_id = 1 (varint); heartbeat = 3 (HeartbeatRequest) }
//   HeartbeatRequest { agent_version = 1 (string); sent_at = 2 (Timestamp) }
//   SessionResponse  { reply = 2 (Reply) }
//   Reply            { message_id = 1 (varint); heartbeat = 3 (HeartbeatResponse) }
//   HeartbeatResponse{ server_time = 3 (Timestamp) }
//   Timestamp        { seconds = 1 (varint); nanos = 2 (varint) }

import { boundsOf } from "../edge/bounds.js";
import { HeartbeatRequestSchema } from "../../gen/proto/modelforge/agent/v1/agent_pb.js";
import { timestampSeconds } from "../edge/validate.js";
import { isPrintableAscii, pushField, pushMessage, varint } from "../../common/protobuf-wire.js";

/** Tags (field number << 3 | wire type) of the fields read and written here. */
const tag = { varint1: 0x08, varint2: 0x10, bytes1: 0x0a, bytes2: 0x12, bytes3: 0x1a } as const;

/** The contract's bound on agent_version (its annotation) and the edge's on a timestamp, so the reader cannot drift from them. */
const agentVersionBound = boundsOf(HeartbeatRequestSchema.field.agentVersion).string?.maxBytes;
if (agentVersionBound === undefined) throw new Error("HeartbeatRequest.agent_version has no max_bytes in proto/");
const maxAgentVersionBytes = agentVersionBound;
const maxTimestampSeconds = Number(timestampSeconds[1]);
const maxNanos = 999_999_999;

/** A Timestamp within the edge's range, each field at most once. */
function plainTimestamp(bytes: Uint8Array, at: number, end: number): boolean {
  let seen = 0;
  while (at < end) {
    const t = bytes[at++]!;
    const bit = t === tag.varint1 ? 1 : t === tag.varint2 ? 2 : 0;
    if (bit === 0 || seen & bit) return false;
    seen |= bit;
    const v = varint(bytes, at, end);
    if (v === undefined || v[0] > (bit === 1 ? maxTimestampSeconds : maxNanos)) return false;
    at = v[1];
  }
  return true;
}

/** A HeartbeatRequest of a short printable ASCII agent_version and a plain sent_at, nothing else. */
function plainHeartbeatBody(bytes: Uint8Array, at: number, end: number): boolean {
  let seen = 0;
  while (at < end) {
    const t = bytes[at++]!;
    const bit = t === tag.bytes1 ? 1 : t === tag.bytes2 ? 2 : 0;
    if (bit === 0 || seen & bit) return false;
    seen |= bit;
    const len = varint(bytes, at, end);
    if (len === undefined || len[1] + len[0] > end) return false;
    const [n, from] = len;
    if (bit === 1) {
      if (n > maxAgentVersionBytes) return false;
      if (!isPrintableAscii(bytes, from, from + n)) return false;
    } else if (!plainTimestamp(bytes, from, from + n)) return false;
    at = from + n;
  }
  return true;
}

/**
 * The message id of an encoded SessionRequest that is a plain heartbeat (see above), or undefined
 * when it is anything else and must be decoded and checked the general way.
 */
export function plainHeartbeatId(bytes: Uint8Array): bigint | undefined {
  const end = bytes.length;
  let at = 0;
  let id = 0;
  let seen = 0;
  while (at < end) {
    const t = bytes[at++]!;
    if (t === tag.varint1 && !(seen & 1)) {
      const v = varint(bytes, at, end);
      if (v === undefined) return undefined;
      [id, at] = v;
      seen |= 1;
    } else if (t === tag.bytes3 && !(seen & 2)) {
      const len = varint(bytes, at, end);
      if (len === undefined || len[1] + len[0] > end || !plainHeartbeatBody(bytes, len[1], len[1] + len[0])) return undefined;
      at = len[1] + len[0];
      seen |= 2;
    } else return undefined;
  }
  return seen & 2 ? BigInt(id) : undefined;
}

/**
 * SessionResponse { reply { message_id, heartbeat { server_time } } } for the server's clock at
 * `nowMs`, encoded as protobuf-es encodes it (fields in number order, zero scalars left out).
 */
export function heartbeatReplyBytes(messageId: bigint, nowMs: number): Uint8Array {
  const seconds = Math.floor(nowMs / 1000);
  const nanos = (nowMs - seconds * 1000) * 1_000_000;
  const timestamp: number[] = [];
  if (seconds !== 0) {
    pushField(timestamp, tag.varint1, seconds);
  }
  if (nanos !== 0) {
    pushField(timestamp, tag.varint2, nanos);
  }
  const response: number[] = [];
  pushMessage(response, tag.bytes3, timestamp);
  const reply: number[] = [];
  if (messageId !== 0n) {
    pushField(reply, tag.varint1, messageId);
  }
  pushMessage(reply, tag.bytes3, response);
  const out: number[] = [];
  pushMessage(out, tag.bytes2, reply);
  return Uint8Array.from(out);
}

/**
 * SessionResponse { reply { message_id } }: the acknowledgement of a relayed message (an invoke
 * answer, log lines), one per answer a node sends, as protobuf-es encodes it.
 */
export function emptyReplyBytes(messageId: bigint): Uint8Array {
  const reply: number[] = [];
  if (messageId !== 0n) {
    pushField(reply, tag.varint1, messageId);
  }
  const out: number[] = [];
  pushMessage(out, tag.bytes2, reply);
  return Uint8Array.from(out);
}
