// A request field's bounds, read from its buf.validate (protovalidate) annotation in proto/: the
// contract states them, for every client in every language, and this reads them back for the edge
// checks that do not go through protovalidate (./validate.ts: the Session's messages). Pure, and
// read once per field.
import { getOption, hasOption, isFieldSet, type DescField, type DescMessage, type Message } from "@bufbuild/protobuf";
import {
  BytesRulesSchema,
  field as fieldRulesOption,
  MapRulesSchema,
  RepeatedRulesSchema,
  StringRulesSchema,
  type FieldRules,
  type StringRules,
} from "../../gen/proto/buf/validate/validate_pb.js";

/** A string's bounds. */
export interface StringBounds {
  maxBytes: number | undefined;
  minBytes: number;
  /** A canonical UUID when not empty. */
  uuid: boolean;
  /** Line breaks and tabs allowed (a field whose annotation gives a pattern: PEM, log text); no other control character. */
  multiline: boolean;
}

/** What the annotation bounds, by the field's kind; undefined where it says nothing. */
export interface FieldBounds {
  string?: StringBounds;
  bytesMax?: number;
  /** Repeated fields and maps: the most entries. */
  maxCount?: number;
  /** A repeated field's items, a map's keys and values. */
  items?: FieldBounds;
  keys?: FieldBounds;
  values?: FieldBounds;
  /** Numbers (and their wrappers): the smallest and largest value accepted. */
  range?: readonly [number, number];
}

const cache = new WeakMap<DescField, FieldBounds>();

/** The bounds `field`'s annotation states (none: an empty object). */
export function boundsOf(field: DescField): FieldBounds {
  let bounds = cache.get(field);
  if (bounds === undefined) {
    bounds = hasOption(field, fieldRulesOption) ? fromRules(getOption(field, fieldRulesOption)) : {};
    cache.set(field, bounds);
  }
  return bounds;
}

/** FieldRules as bounds: also for a repeated field's items and a map's keys and values. */
export function fromRules(rules: FieldRules): FieldBounds {
  const t = rules.type;
  switch (t.case) {
    case "string":
      return { string: stringBounds(t.value) };
    case "bytes":
      return withDefined("bytesMax", set(BytesRulesSchema, t.value, "maxLen"));
    case "repeated":
      return {
        ...withDefined("maxCount", set(RepeatedRulesSchema, t.value, "maxItems")),
        ...(t.value.items !== undefined ? { items: fromRules(t.value.items) } : {}),
      };
    case "map":
      return {
        ...withDefined("maxCount", set(MapRulesSchema, t.value, "maxPairs")),
        ...(t.value.keys !== undefined ? { keys: fromRules(t.value.keys) } : {}),
        ...(t.value.values !== undefined ? { values: fromRules(t.value.values) } : {}),
      };
    case "double":
    case "float":
      return { range: [lowest(t.value.greaterThan), highest(t.value.lessThan)] };
    case "uint32":
    case "uint64":
      return { range: [0, highest(t.value.lessThan)] };
    default:
      return {};
  }
}

function stringBounds(s: StringRules): StringBounds {
  return {
    maxBytes: set(StringRulesSchema, s, "maxBytes"),
    minBytes: set(StringRulesSchema, s, "minBytes") ?? 0,
    uuid: s.wellKnown.case === "uuid" && s.wellKnown.value,
    multiline: isFieldSet(s, StringRulesSchema.field.pattern) && s.pattern !== "",
  };
}

/** An optional rule's number, when the annotation sets it (an unset proto2 field reads as 0). */
function set(schema: DescMessage, rules: Message, name: string): number | undefined {
  const field = schema.fields.find((f) => f.localName === name)!;
  return isFieldSet(rules, field) ? Number((rules as unknown as Record<string, bigint | number>)[name]) : undefined;
}
const withDefined = <K extends string>(key: K, value: number | undefined) =>
  value === undefined ? {} : ({ [key]: value } as Record<K, number>);

function lowest(bound: { case: "gte"; value: number } | { case: undefined; value?: undefined }): number {
  return bound.case === "gte" ? bound.value : Number.NEGATIVE_INFINITY;
}

function highest(bound: { case: "lte"; value: number | bigint } | { case: undefined; value?: undefined }): number {
  return bound.case === "lte" ? Number(bound.value) : Number.POSITIVE_INFINITY;
}
