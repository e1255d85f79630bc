// The edge check of every request message, before any handler, database or log sees it: bad input
// is refused with invalid_argument naming the field by its proto path, e.g.
// `report.host.disks[2].mount: contains a control character (U+0000)`.
//
// Two parts:
// - each field's bounds, which the contract states as buf.validate annotations in proto/ (lengths,
//   counts, ranges, UUIDs): checked by protovalidate (./protovalidate.ts) for unary and
//   server-streaming calls, and read from the same annotations (./bounds.ts) by the walk below for
//   the Session's messages: one walk that checks both rules cost less than half of the walk
//   followed by protovalidate per message (bench/validation.ts), on every agent's stream;
// - what holds for every field, whatever its annotation (the contract's file headers say it):
//   strings without control characters (C0, DEL, C1; a field whose annotation gives a pattern may
//   carry line breaks and tabs) or unpaired surrogates; 64-bit unsigned integers at most 2^63-1 and
//   32-bit ones at most 2^31-1 (what PostgreSQL's bigint and integer store); floating point values
//   finite; enum values known to this build; google.protobuf.Timestamp and Duration within their
//   documented ranges; a FieldMask of at most 16 paths of at most 64 bytes.
// Rules of meaning (a job spec's capability, a path's grammar, what a node may do) stay with the
// handlers; this layer guarantees they only ever see bounded, printable, storable input.
import { Buffer } from "node:buffer";
import { Code, ConnectError, type Interceptor } from "@connectrpc/connect";
import { ScalarType, type DescEnum, type DescField, type DescMessage, type Message } from "@bufbuild/protobuf";
import { reflect, type ReflectMessage } from "@bufbuild/protobuf/reflect";
import { isUuid } from "../../common/x509.js";
import { boundsOf, type FieldBounds, type StringBounds } from "./bounds.js";
import { boundsViolation } from "./protovalidate.js";

const maxInt64 = 2n ** 63n - 1n;
const maxInt32 = 2 ** 31 - 1;
/** 0001-01-01T00:00:00Z and 9999-12-31T23:59:59Z, the range google.protobuf.Timestamp allows. */
export const timestampSeconds = [-62_135_596_800n, 253_402_300_799n] as const;
/** About 10,000 years, the range google.protobuf.Duration allows. */
const durationSeconds = 315_576_000_000n;
/** google.protobuf.FieldMask, which proto/ cannot annotate: what an update names. */
const fieldMask = { maxPaths: 16, maxPathBytes: 64 };

const controlCharacter = /[\u0000-\u001f\u007f-\u009f]/;
const controlExceptLineBreaks = /[\u0000-\u0008\u000b\u000c\u000e-\u001f\u007f-\u009f]/;
const unpairedSurrogate = /\p{Surrogate}/u;

/** A request breaks a rule: `path: reason`. */
class Violation extends Error {}

function violation(path: string, reason: string): never {
  throw new Violation(`${path}: ${reason}`);
}

/** Whether the walk checks the annotated bounds too (the Session's messages), or leaves them to protovalidate. */
type Walk = { bounds: boolean };

const noString: StringBounds = { maxBytes: undefined, minBytes: 0, uuid: false, multiline: false };

function checkString(value: string, path: string, s: StringBounds, walk: Walk): void {
  if (walk.bounds) {
    const max = s.maxBytes;
    // The UTF-16 length bounds the UTF-8 length from below: no need to measure a string that is far
    // too long, and no need to scan it either.
    if (max !== undefined && (value.length > max || Buffer.byteLength(value, "utf8") > max)) violation(path, `is longer than ${max} bytes`);
    if (s.minBytes > 0 && value === "") violation(path, "must not be empty");
  }
  const control = (s.multiline ? controlExceptLineBreaks : controlCharacter).exec(value);
  if (control) {
    const code = control[0].charCodeAt(0).toString(16).toUpperCase().padStart(4, "0");
    violation(path, `contains a control character (U+${code})`);
  }
  if (unpairedSurrogate.test(value)) violation(path, "contains an unpaired UTF-16 surrogate");
  if (walk.bounds && s.uuid && value !== "" && !isUuid(value)) violation(path, "is not a UUID (8-4-4-4-12 hexadecimal digits)");
}

function checkScalar(scalar: ScalarType, value: unknown, path: string, b: FieldBounds, walk: Walk): void {
  switch (scalar) {
    case ScalarType.STRING:
      return checkString(value as string, path, b.string ?? noString, walk);
    case ScalarType.BYTES: {
      const max = b.bytesMax;
      if (walk.bounds && max !== undefined && (value as Uint8Array).byteLength > max) violation(path, `is longer than ${max} bytes`);
      return;
    }
    case ScalarType.UINT64:
    case ScalarType.FIXED64:
      if (BigInt(value as bigint) > maxInt64) violation(path, `is above ${maxInt64}, the largest value stored`);
      return checkRange(Number(value), path, b, walk);
    case ScalarType.UINT32:
    case ScalarType.FIXED32:
      if ((value as number) > maxInt32) violation(path, `is above ${maxInt32}, the largest value stored`);
      return checkRange(value as number, path, b, walk);
    case ScalarType.DOUBLE:
    case ScalarType.FLOAT:
      if (!Number.isFinite(value)) violation(path, "must be a finite number");
      return checkRange(value as number, path, b, walk);
    default:
      return;
  }
}

function checkRange(value: number, path: string, b: FieldBounds, walk: Walk): void {
  if (walk.bounds && b.range && (value < b.range[0] || value > b.range[1])) violation(path, `must be from ${b.range[0]} to ${b.range[1]}`);
}

/** An enum field (singular, repeated or map value) holds a value this build knows. */
function checkEnum(field: DescField, value: number, path: string): void {
  const desc = (field as { enum?: DescEnum }).enum;
  if (desc !== undefined && !desc.values.some((v) => v.number === value)) {
    violation(path, `${value} is not a value of ${desc.typeName}`);
  }
}

/** Timestamps, durations and field masks have rules of their own; true when `m` was one of them. */
function checkWellKnown(m: ReflectMessage, path: string): boolean {
  const name = m.desc.typeName;
  if (name === "google.protobuf.FieldMask") {
    const paths = (m.message as unknown as { paths: string[] }).paths;
    if (paths.length > fieldMask.maxPaths)
      violation(`${path}.paths`, `has ${paths.length} entries; at most ${fieldMask.maxPaths} are accepted`);
    const pathBounds = { ...noString, maxBytes: fieldMask.maxPathBytes };
    for (const [i, p] of paths.entries()) checkString(p, `${path}.paths[${i}]`, pathBounds, { bounds: true });
    return true;
  }
  if (name !== "google.protobuf.Timestamp" && name !== "google.protobuf.Duration") return false;
  const { seconds, nanos } = m.message as unknown as { seconds: bigint; nanos: number };
  if (name === "google.protobuf.Timestamp") {
    if (seconds < timestampSeconds[0] || seconds > timestampSeconds[1] || nanos < 0 || nanos > 999_999_999) {
      violation(path, "is not a timestamp between the years 1 and 9999");
    }
  } else if (
    seconds < -durationSeconds ||
    seconds > durationSeconds ||
    nanos < -999_999_999 ||
    nanos > 999_999_999 ||
    (seconds > 0n && nanos < 0) ||
    (seconds < 0n && nanos > 0)
  ) {
    violation(path, "is not a well-formed duration of at most 10,000 years");
  }
  return true;
}

function checkList(field: DescField & { fieldKind: "list" }, m: ReflectMessage, at: string, b: FieldBounds, walk: Walk): void {
  const list = m.get(field);
  if (walk.bounds && b.maxCount !== undefined && list.size > b.maxCount)
    violation(at, `has ${list.size} entries; at most ${b.maxCount} are accepted`);
  const items = b.items ?? {};
  let i = 0;
  for (const item of list.values()) {
    const itemAt = `${at}[${i++}]`;
    if (field.listKind === "scalar") checkScalar(field.scalar, item, itemAt, items, walk);
    else if (field.listKind === "enum") checkEnum(field, item as number, itemAt);
    else checkMessage(item as ReflectMessage, itemAt, walk);
  }
}

function checkMap(field: DescField & { fieldKind: "map" }, m: ReflectMessage, at: string, b: FieldBounds, walk: Walk): void {
  const map = m.get(field);
  if (walk.bounds && b.maxCount !== undefined && map.size > b.maxCount)
    violation(at, `has ${map.size} entries; at most ${b.maxCount} are accepted`);
  for (const [key, value] of map) {
    if (typeof key === "string") checkString(key, `${at} key`, b.keys?.string ?? noString, walk);
    // Keys are short and printable once checked, so they can name the entry.
    const valueAt = `${at}[${JSON.stringify(String(key))}]`;
    if (field.mapKind === "scalar") checkScalar(field.scalar, value, valueAt, b.values ?? {}, walk);
    else if (field.mapKind === "enum") checkEnum(field, value as number, valueAt);
    else checkMessage(value as ReflectMessage, valueAt, walk);
  }
}

function checkMessage(m: ReflectMessage, path: string, walk: Walk): void {
  if (checkWellKnown(m, path)) return;
  for (const field of m.fields) {
    if (!m.isSet(field)) continue;
    const at = path === "" ? field.name : `${path}.${field.name}`;
    const b = boundsOf(field);
    switch (field.fieldKind) {
      case "scalar":
        checkScalar(field.scalar, m.get(field), at, b, walk);
        break;
      case "enum":
        checkEnum(field, m.get(field) as number, at);
        break;
      case "message": {
        const inner = m.get(field) as ReflectMessage;
        // A wrapper (google.protobuf.DoubleValue, ...) takes its field's bounds on its value.
        const wrapped = /^google\.protobuf\.\w+Value$/.test(inner.desc.typeName) ? inner.fields[0] : undefined;
        if (wrapped?.fieldKind === "scalar") checkScalar(wrapped.scalar, inner.get(wrapped), at, b, walk);
        else checkMessage(inner, at, walk);
        break;
      }
      case "list":
        checkList(field, m, at, b, walk);
        break;
      case "map":
        checkMap(field, m, at, b, walk);
        break;
    }
  }
}

/**
 * The first rule a request message breaks, as an invalid_argument error naming the field, or
 * undefined when it keeps them all: what every field must be, then the bounds the contract
 * annotates (protovalidate's verdict). Pure.
 */
export function requestViolation(desc: DescMessage, message: Message): ConnectError | undefined {
  return walkViolation(desc, message, { bounds: false }) ?? boundsViolation(desc, message);
}

/**
 * The same verdict by the hand-written walk alone, the bounds read from the annotations: for the
 * Session's messages, one check per message on every agent's stream. test/unit/edge-bounds.test.ts
 * holds it to protovalidate's verdict.
 */
export function sessionMessageViolation(desc: DescMessage, message: Message): ConnectError | undefined {
  return walkViolation(desc, message, { bounds: true });
}

function walkViolation(desc: DescMessage, message: Message, walk: Walk): ConnectError | undefined {
  try {
    checkMessage(reflect(desc, message), "", walk);
    return undefined;
  } catch (err) {
    if (err instanceof Violation) return new ConnectError(err.message, Code.InvalidArgument);
    throw err;
  }
}

/**
 * connect-es reports a request body it cannot decode as internal ("parse binary: ..."); to the
 * caller it is bad input. Anything else passes unchanged.
 */
export function asDecodeError(err: unknown): unknown {
  if (err instanceof ConnectError && err.code === Code.Internal && err.rawMessage.startsWith("parse binary:")) {
    return new ConnectError(
      `request body is not a valid message: ${err.rawMessage.slice("parse binary:".length).trim()}`,
      Code.InvalidArgument,
    );
  }
  return err;
}

/** Validates each message of a request stream as it arrives. */
async function* checked(desc: DescMessage, messages: AsyncIterable<Message>, validate: boolean): AsyncIterable<Message> {
  try {
    for await (const message of messages) {
      const refused = validate ? requestViolation(desc, message) : undefined;
      if (refused !== undefined) throw refused;
      yield message;
    }
  } catch (err) {
    throw asDecodeError(err);
  }
}

/**
 * The edge check as a Connect interceptor: unary and server-streaming requests are refused before
 * the handler runs. A bidirectional stream (the Session) answers each bad message itself, keeping
 * the stream open (see ../sessions/session.ts); here only its undecodable frames are mapped.
 */
export function validationInterceptor(): Interceptor {
  return (next) => async (req) => {
    if (!req.stream) {
      const refused = requestViolation(req.method.input, req.message);
      if (refused !== undefined) throw refused;
      return next(req);
    }
    const validate = req.method.methodKind !== "bidi_streaming";
    return next({ ...req, message: checked(req.method.input, req.message, validate) });
  };
}
