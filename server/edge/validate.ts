// One validation layer at the edge, driven by the generated descriptors: every request message of
// every service is walked field by field before any handler, database or log sees it, and bad
// input is refused with invalid_argument naming the field by its proto path, e.g.
// `report.host.disks[2].mount: contains a control character (U+0000)`.
//
// The rules hold for every field of the contract (bounds come from ./field-rules.ts):
// - strings: at most their maximum bytes of UTF-8; no control characters (C0, DEL, C1) and no
//   unpaired surrogates, except that PEM fields may carry line breaks and tabs; UUID fields are
//   canonical UUIDs when set;
// - repeated and map fields: bounded in count; map keys and values like strings;
// - 64-bit unsigned integers at most 2^63-1 and 32-bit unsigned ones at most 2^31-1 (what
//   PostgreSQL's bigint and integer store); floating point values finite; numbers within their
//   range where the contract gives one;
// - enum values known to this build;
// - google.protobuf.Timestamp and Duration within their documented ranges.
// Rules of meaning (a job spec's capability, a path's grammar, what a node may do) stay with the
// handlers; this layer guarantees they only ever see bounded, printable, storable input.
import { Buffer } from "node:buffer";
import { Code, ConnectError, type Interceptor } from "@connectrpc/connect";
import { ScalarType, type DescEnum, type DescField, type DescMessage, type Message } from "@bufbuild/protobuf";
import { reflect, type ReflectMessage } from "@bufbuild/protobuf/reflect";
import { isUuid } from "../../common/x509.js";
import { defaultRules, fieldRules, type FieldRule } from "./field-rules.js";

const maxInt64 = 2n ** 63n - 1n;
const maxInt32 = 2 ** 31 - 1;
/** 0001-01-01T00:00:00Z and 9999-12-31T23:59:59Z, the range google.protobuf.Timestamp allows. */
export const timestampSeconds = [-62_135_596_800n, 253_402_300_799n] as const;
/** About 10,000 years, the range google.protobuf.Duration allows. */
const durationSeconds = 315_576_000_000n;

const controlCharacter = /[\u0000-\u001f\u007f-\u009f]/;
const controlExceptLineBreaks = /[\u0000-\u0008\u000b\u000c\u000e-\u001f\u007f-\u009f]/;
const unpairedSurrogate = /\p{Surrogate}/u;

/** A request breaks a rule: `path: reason`. */
class Violation extends Error {}

function violation(path: string, reason: string): never {
  throw new Violation(`${path}: ${reason}`);
}

// Every Session message is checked, heartbeats included: look each field's rule up once.
const rulesByField = new WeakMap<DescField, FieldRule>();
function ruleOf(field: DescField): FieldRule {
  let rule = rulesByField.get(field);
  if (rule === undefined) {
    rule = fieldRules[`${field.parent.typeName}.${field.name}`] ?? {};
    rulesByField.set(field, rule);
  }
  return rule;
}

function checkString(value: string, path: string, rule: FieldRule, fallbackMax: number): void {
  const max = rule.maxBytes ?? fallbackMax;
  // The UTF-16 length bounds the UTF-8 length from below: no need to measure a string that is far
  // too long, and no need to scan it either.
  if (value.length > max || Buffer.byteLength(value, "utf8") > max) violation(path, `is longer than ${max} bytes`);
  const control = (rule.multiline ? controlExceptLineBreaks : controlCharacter).exec(value);
  if (control) {
    const code = control[0].charCodeAt(0).toString(16).toUpperCase().padStart(4, "0");
    violation(path, `contains a control character (U+${code})`);
  }
  if (unpairedSurrogate.test(value)) violation(path, "contains an unpaired UTF-16 surrogate");
  if (rule.uuid && value !== "" && !isUuid(value)) violation(path, "is not a UUID (8-4-4-4-12 hexadecimal digits)");
}

function checkScalar(scalar: ScalarType, value: unknown, path: string, rule: FieldRule): void {
  switch (scalar) {
    case ScalarType.STRING:
      return checkString(value as string, path, rule, defaultRules.string.maxBytes);
    case ScalarType.BYTES: {
      const max = rule.maxBytes ?? defaultRules.bytes.maxBytes;
      if ((value as Uint8Array).byteLength > max) violation(path, `is longer than ${max} bytes`);
      return;
    }
    case ScalarType.UINT64:
    case ScalarType.FIXED64:
      if (BigInt(value as bigint) > maxInt64) violation(path, `is above ${maxInt64}, the largest value stored`);
      return checkRange(Number(value), path, rule);
    case ScalarType.UINT32:
    case ScalarType.FIXED32:
      if ((value as number) > maxInt32) violation(path, `is above ${maxInt32}, the largest value stored`);
      return checkRange(value as number, path, rule);
    case ScalarType.DOUBLE:
    case ScalarType.FLOAT:
      if (!Number.isFinite(value)) violation(path, "must be a finite number");
      return checkRange(value as number, path, rule);
    default:
      return;
  }
}

function checkRange(value: number, path: string, rule: FieldRule): void {
  if (rule.range && (value < rule.range[0] || value > rule.range[1])) violation(path, `must be from ${rule.range[0]} to ${rule.range[1]}`);
}

/** An enum field (singular, repeated or map value) holds a value this build knows. */
function checkEnum(field: DescField, value: number, path: string): void {
  const desc = (field as { enum?: DescEnum }).enum;
  if (desc !== undefined && !desc.values.some((v) => v.number === value)) {
    violation(path, `${value} is not a value of ${desc.typeName}`);
  }
}

/** Timestamps and durations have ranges of their own; true when `m` was one of them. */
function checkWellKnown(m: ReflectMessage, path: string): boolean {
  const name = m.desc.typeName;
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

function checkMessage(m: ReflectMessage, path: string): void {
  if (checkWellKnown(m, path)) return;
  for (const field of m.fields) {
    if (!m.isSet(field)) continue;
    const at = path === "" ? field.name : `${path}.${field.name}`;
    const rule = ruleOf(field);
    switch (field.fieldKind) {
      case "scalar":
        checkScalar(field.scalar, m.get(field), at, rule);
        break;
      case "enum":
        checkEnum(field, m.get(field) as number, at);
        break;
      case "message": {
        const inner = m.get(field) as ReflectMessage;
        // A wrapper (google.protobuf.DoubleValue, ...) takes its field's rule on its value.
        const wrapped = /^google\.protobuf\.\w+Value$/.test(inner.desc.typeName) ? inner.fields[0] : undefined;
        if (wrapped?.fieldKind === "scalar") checkScalar(wrapped.scalar, inner.get(wrapped), at, rule);
        else checkMessage(inner, at);
        break;
      }
      case "list": {
        const list = m.get(field);
        const max = rule.maxCount ?? defaultRules.list.maxCount;
        if (list.size > max) violation(at, `has ${list.size} entries; at most ${max} are accepted`);
        let i = 0;
        for (const item of list.values()) {
          const itemAt = `${at}[${i++}]`;
          if (field.listKind === "scalar") checkScalar(field.scalar, item, itemAt, rule);
          else if (field.listKind === "enum") checkEnum(field, item as number, itemAt);
          else checkMessage(item as ReflectMessage, itemAt);
        }
        break;
      }
      case "map": {
        const map = m.get(field);
        const max = rule.maxCount ?? defaultRules.map.maxCount;
        if (map.size > max) violation(at, `has ${map.size} entries; at most ${max} are accepted`);
        const keyRule = { maxBytes: rule.maxKeyBytes ?? defaultRules.map.maxKeyBytes };
        for (const [key, value] of map) {
          if (typeof key === "string") {
            checkString(key, `${at} key`, keyRule, keyRule.maxBytes);
            if (key === "") violation(`${at} key`, "must not be empty");
          }
          // Keys are short and printable once checked, so they can name the entry.
          const valueAt = `${at}[${JSON.stringify(String(key))}]`;
          if (field.mapKind === "scalar") checkScalar(field.scalar, value, valueAt, { maxBytes: defaultRules.map.maxBytes, ...rule });
          else if (field.mapKind === "enum") checkEnum(field, value as number, valueAt);
          else checkMessage(value as ReflectMessage, valueAt);
        }
        break;
      }
    }
  }
}

/**
 * The first rule a request message breaks, as an invalid_argument error naming the field, or
 * undefined when it keeps them all. Pure.
 */
export function requestViolation(desc: DescMessage, message: Message): ConnectError | undefined {
  try {
    checkMessage(reflect(desc, message), "");
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
