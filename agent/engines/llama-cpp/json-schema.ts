// A JSON schema as the engine holds an answer to it (llama-server turns it into a grammar), pure:
// the keywords the grammar enforces pass, annotations (title, description, default, examples) pass,
// and any other keyword is refused with a 400 naming it. llama.cpp's converter skips a keyword it
// does not know, so without this an answer could break a schema the caller was told it keeps.
import { OpenAiError } from "../openai-protocol.js";

export type JsonSchema = Record<string, unknown>;

const types = new Set(["string", "number", "integer", "boolean", "null", "object", "array"]);
const annotations = new Set([
  "title",
  "description",
  "default",
  "examples",
  "$schema",
  "$id",
  "$comment",
  "deprecated",
  "readOnly",
  "writeOnly",
]);
const formats = new Set(["date-time", "time", "date", "uuid"]);
const maxDepth = 32;
const maxNodes = 2_000;

/** Keywords the grammar enforces, and how each is checked here. */
const keywords: Record<string, (value: unknown, at: string, walk: (s: unknown, at: string) => JsonSchema) => unknown> = {
  type: (v, at) => {
    const list = Array.isArray(v) ? v : [v];
    if (list.length === 0 || !list.every((t) => typeof t === "string" && types.has(t))) fail(at, "type must name JSON types");
    return v;
  },
  const: (v, at) => scalar(v, at),
  enum: (v, at) => {
    if (!Array.isArray(v) || v.length === 0) fail(at, "enum must be a non-empty array");
    for (const item of v as unknown[]) scalar(item, at);
    return v;
  },
  properties: (v, at, walk) => mapOf(v, at, walk),
  required: (v, at) => {
    if (!Array.isArray(v) || !v.every((r) => typeof r === "string")) fail(at, "required must list property names");
    return v;
  },
  additionalProperties: (v, at, walk) => (typeof v === "boolean" ? v : walk(v, at)),
  items: (v, at, walk) => walk(v, at),
  prefixItems: (v, at, walk) => listOf(v, at, walk),
  minItems: (v, at) => count(v, at),
  maxItems: (v, at) => count(v, at),
  minLength: (v, at) => count(v, at),
  maxLength: (v, at) => count(v, at),
  format: (v, at) => {
    if (typeof v !== "string" || !formats.has(v))
      fail(at, `format ${JSON.stringify(v)} is not supported (date-time, time, date or uuid only)`);
    return v;
  },
  // Bounds on integers; llama.cpp holds a number of another type to none of them (checked below).
  minimum: (v, at) => finite(v, at),
  maximum: (v, at) => finite(v, at),
  exclusiveMinimum: (v, at) => finite(v, at),
  exclusiveMaximum: (v, at) => finite(v, at),
  anyOf: (v, at, walk) => listOf(v, at, walk),
  oneOf: (v, at, walk) => listOf(v, at, walk),
  $defs: (v, at, walk) => mapOf(v, at, walk),
  definitions: (v, at, walk) => mapOf(v, at, walk),
  $ref: (v, at) => {
    if (typeof v !== "string" || !/^#\/(\$defs|definitions)\/[A-Za-z0-9_.-]+$/.test(v)) {
      fail(at, 'only references to "#/$defs/<name>" or "#/definitions/<name>" are supported');
    }
    return v;
  },
};
const bounds = ["minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"];

function fail(at: string, message: string): never {
  const printable = at.replace(/[^\x20-\x7e]/g, "?").slice(0, 200);
  throw new OpenAiError(400, "invalid_request_error", "unsupported_schema", `${printable}: ${message}`, printable);
}

function scalar(v: unknown, at: string): unknown {
  if (v !== null && !["string", "number", "boolean"].includes(typeof v))
    fail(at, "const and enum values must be strings, numbers, booleans or null");
  return v;
}

function finite(v: unknown, at: string): unknown {
  if (!Number.isInteger(v)) fail(at, "must be an integer (llama.cpp bounds integers only)");
  return v;
}

function count(v: unknown, at: string): unknown {
  if (!Number.isInteger(v) || (v as number) < 0) fail(at, "must be a non-negative integer");
  return v;
}

function mapOf(v: unknown, at: string, walk: (s: unknown, at: string) => JsonSchema): Record<string, JsonSchema> {
  if (v === null || typeof v !== "object" || Array.isArray(v)) fail(at, "must be an object of schemas");
  return Object.fromEntries(Object.entries(v as Record<string, unknown>).map(([k, s]) => [k, walk(s, `${at}.${k}`)]));
}

function listOf(v: unknown, at: string, walk: (s: unknown, at: string) => JsonSchema): JsonSchema[] {
  if (!Array.isArray(v) || v.length === 0) fail(at, "must be a non-empty array of schemas");
  return (v as unknown[]).map((s, i) => walk(s, `${at}[${i}]`));
}

/**
 * The schema as the grammar takes it, or a 400 naming the first keyword it cannot enforce
 * (`param` names where the schema is in the request). Bounded in depth and size.
 */
export function checkJsonSchema(schema: unknown, param: string): JsonSchema {
  let nodes = 0;
  const walk = (s: unknown, at: string, depth: number): JsonSchema => {
    if (++nodes > maxNodes) fail(param, `the schema has more than ${maxNodes} parts`);
    if (depth > maxDepth) fail(at, `the schema nests deeper than ${maxDepth} levels`);
    if (s === true) return {};
    if (s === null || typeof s !== "object" || Array.isArray(s)) fail(at, "a schema must be an object");
    const kept: [string, unknown][] = [];
    for (const [key, value] of Object.entries(s as Record<string, unknown>)) {
      if (annotations.has(key)) {
        if (key === "description" && typeof value === "string") kept.push([key, value]);
        continue;
      }
      // Own keys only: a key such as "__proto__" or "constructor" is no keyword.
      const check = Object.hasOwn(keywords, key) ? keywords[key] : undefined;
      if (check === undefined) fail(`${at}.${key}`, `"${key}" is not supported: an answer could not be held to it`);
      kept.push([key, check(value, `${at}.${key}`, (inner, innerAt) => walk(inner, innerAt, depth + 1))]);
    }
    // fromEntries defines each key as the object's own, whatever its name.
    const out: JsonSchema = Object.fromEntries(kept);
    const bounded = bounds.find((b) => Object.hasOwn(out, b));
    if (bounded !== undefined && out.type !== "integer") fail(`${at}.${bounded}`, 'is held only on "type": "integer"');
    return out;
  };
  return walk(schema, param, 0);
}
