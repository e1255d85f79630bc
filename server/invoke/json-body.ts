// An untrusted JSON request body read into a bounded object, before any field is looked at: UTF-8
// only, nesting at most `maxJsonDepth` deep, no unpaired surrogate in any string or key. Pure, and
// free of any transport, so every front door (the Connect invoke, the OpenAI HTTP API) shares it.
// Why the depth bound: V8 parses deep JSON fine, but every recursive consumer after it
// (JSON.stringify on the node, a runtime's parser) runs out of stack, so the body is refused here.

/** The deepest nesting of arrays and objects a body may have (OpenAI requests need a handful). */
export const maxJsonDepth = 64;

/** A refusal of a request body, naming the offending field (`param`) as OpenAI's errors do. */
export class RequestError extends Error {
  constructor(
    readonly param: string,
    message: string,
  ) {
    super(message);
    this.name = "RequestError";
  }
}

const utf8 = new TextDecoder("utf-8", { fatal: true });

/** The body as a JSON object, or a RequestError saying why not. */
export function parseJsonObject(bytes: Uint8Array): Record<string, unknown> {
  let text: string;
  try {
    text = utf8.decode(bytes);
  } catch {
    throw new RequestError("body", "the body is not valid UTF-8");
  }
  let body: unknown;
  try {
    body = JSON.parse(text);
  } catch {
    throw new RequestError("body", "the body is not valid JSON");
  }
  if (typeof body !== "object" || body === null || Array.isArray(body)) {
    throw new RequestError("body", "the body must be a JSON object");
  }
  checkShape(body);
  return body as Record<string, unknown>;
}

/** Where a value sits in the body, kept as links to its parent: the path is spelled only for a refusal. */
interface At {
  parent: At | undefined;
  key: string | number;
}

/** "messages[2].content", as OpenAI's errors name a field. */
function pathOf(at: At | undefined): string {
  const parts: (string | number)[] = [];
  for (let a = at; a !== undefined; a = a.parent) parts.unshift(a.key);
  return parts.map((p, i) => (typeof p === "number" ? `[${p}]` : i === 0 ? p : `.${p}`)).join("");
}

/** Walks the value without recursion (its depth is what is being checked). */
function checkShape(root: object): void {
  const stack: { value: unknown; depth: number; at: At | undefined }[] = [{ value: root, depth: 1, at: undefined }];
  for (let item = stack.pop(); item !== undefined; item = stack.pop()) {
    const { value, depth, at } = item;
    if (typeof value === "string") {
      if (!wellFormed(value)) throw new RequestError("body", "a string holds an unpaired UTF-16 surrogate");
      continue;
    }
    // JSON has no infinity, but a number past double's range (1e400) parses as one, and goes on
    // as null once serialised again: refused as out of range, not served as if absent.
    if (typeof value === "number") {
      if (!Number.isFinite(value)) throw new RequestError(pathOf(at) || "body", `${pathOf(at)}: the number is out of range`);
      continue;
    }
    if (typeof value !== "object" || value === null) continue;
    if (depth > maxJsonDepth) throw new RequestError("body", `the body nests deeper than ${maxJsonDepth} levels`);
    if (Array.isArray(value)) {
      for (let i = 0; i < value.length; i++) stack.push({ value: value[i], depth: depth + 1, at: { parent: at, key: i } });
      continue;
    }
    for (const [k, v] of Object.entries(value)) {
      if (!wellFormed(k)) throw new RequestError("body", "a key holds an unpaired UTF-16 surrogate");
      stack.push({ value: v, depth: depth + 1, at: { parent: at, key: k } });
    }
  }
}

/** String.prototype.isWellFormed (Node 20 has it; the ES2022 typings do not). */
function wellFormed(s: string): boolean {
  return (s as string & { isWellFormed(): boolean }).isWellFormed();
}
