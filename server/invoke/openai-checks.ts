// Small composable checks for the fields of an OpenAI-style JSON request: each throws a
// RequestError naming the field's path ("messages[2].role") or returns quietly. Pure.
import { RequestError } from "./json-body.js";

export type Check = (value: unknown, param: string) => void;

const fail: (param: string, message: string) => never = (param, message) => {
  throw new RequestError(param, `${param}: ${message}`);
};

export const bool: Check = (v, p) => {
  if (typeof v !== "boolean") fail(p, "must be a boolean");
};

/** A string of at most `max` characters (UTF-16 units; the payload bound covers the rest). */
export const text =
  (max = Number.POSITIVE_INFINITY): Check =>
  (v, p) => {
    if (typeof v !== "string") fail(p, "must be a string");
    if ((v as string).length > max) fail(p, `must be at most ${max} characters`);
  };

export const integer =
  (min: number, max: number): Check =>
  (v, p) => {
    if (typeof v !== "number" || !Number.isSafeInteger(v) || v < min || v > max) fail(p, `must be an integer from ${min} to ${max}`);
  };

export const number =
  (min: number, max: number): Check =>
  (v, p) => {
    if (typeof v !== "number" || !(v >= min && v <= max)) fail(p, `must be a number from ${min} to ${max}`);
  };

export const oneOf =
  (...values: string[]): Check =>
  (v, p) => {
    if (typeof v !== "string" || !values.includes(v)) fail(p, `must be one of ${values.join(", ")}`);
  };

export const matches =
  (pattern: RegExp, what: string): Check =>
  (v, p) => {
    if (typeof v !== "string" || !pattern.test(v)) fail(p, `must be ${what}`);
  };

/** OpenAI marks most optional fields nullable: null passes as if absent. */
export const nullable =
  (check: Check): Check =>
  (v, p) => {
    if (v !== null) check(v, p);
  };

/** The first alternative that passes; else the refusal names every shape allowed. */
export const either =
  (what: string, ...checks: Check[]): Check =>
  (v, p) => {
    for (const check of checks) {
      try {
        check(v, p);
        return;
      } catch (err) {
        if (!(err instanceof RequestError)) throw err;
      }
    }
    fail(p, `must be ${what}`);
  };

export const list =
  (each: Check, min: number, max: number): Check =>
  (v, p) => {
    if (!Array.isArray(v)) return fail(p, "must be an array");
    if (v.length < min || v.length > max) fail(p, `must have ${min} to ${max} entries`);
    for (let i = 0; i < v.length; i++) each(v[i], `${p}[${i}]`);
  };

export const anyObject: Check = (v, p) => {
  if (typeof v !== "object" || v === null || Array.isArray(v)) fail(p, "must be an object");
};

/** An object whose listed fields pass their checks; unlisted fields pass through (runtimes add their own). */
export const shape =
  (fields: Record<string, Check>, required: string[] = []): Check =>
  (v, p) => {
    anyObject(v, p);
    checkFields(v as Record<string, unknown>, fields, required, p);
  };

/** A string-keyed map of at most `max` entries, keys and values checked. */
export const map =
  (key: Check, value: Check, max: number): Check =>
  (v, p) => {
    anyObject(v, p);
    const entries = Object.entries(v as Record<string, unknown>);
    if (entries.length > max) fail(p, `must have at most ${max} entries`);
    for (const [k, item] of entries) {
      key(k, `${p} key`);
      value(item, `${p} value`);
    }
  };

/** Checks `body`'s listed fields; `prefix` is the path of the object ("" for the body itself). */
export function checkFields(body: Record<string, unknown>, fields: Record<string, Check>, required: string[], prefix = ""): void {
  const at = (name: string) => (prefix === "" ? name : `${prefix}.${name}`);
  for (const name of required) if (body[name] === undefined) fail(at(name), "is required");
  for (const [name, check] of Object.entries(fields)) {
    const value = body[name];
    if (value !== undefined) check(value, at(name));
  }
}
