// The fields of OpenAI's chat completions, completions and embeddings requests, checked before a request is
// routed: every field of the two APIs that has a documented type or range, so a hostile value is
// refused here as the caller's mistake instead of reaching a runtime (which might answer 500, or
// run out of stack). Fields not listed pass through: runtimes accept extensions of their own
// (top_k, min_p, ...). `model` is dropped: the deployment decides which model answers. Pure.
import {
  anyObject,
  bool,
  type Check,
  checkFields,
  either,
  integer,
  list,
  map,
  matches,
  nullable,
  number,
  oneOf,
  shape,
  text,
} from "./openai-checks.js";
import { parseJsonObject, RequestError } from "./json-body.js";

export type RequestKind = "chat" | "completion" | "embeddings";

const maxInt32 = 2 ** 31 - 1;
const tokenId = integer(0, maxInt32);
const functionName = matches(/^[A-Za-z0-9_-]{1,64}$/, "1 to 64 letters, digits, underscores or dashes");

/** Fields both APIs share. */
const common: Record<string, Check> = {
  model: text(256),
  max_tokens: nullable(integer(1, maxInt32)),
  max_completion_tokens: nullable(integer(1, maxInt32)),
  temperature: nullable(number(0, 2)),
  top_p: nullable(number(0, 1)),
  n: nullable(integer(1, 128)),
  stop: nullable(either("a string or up to 4 strings", text(1024), list(text(1024), 0, 4))),
  stream: nullable(bool),
  stream_options: nullable(shape({ include_usage: bool, include_obfuscation: bool })),
  seed: nullable(integer(Number.MIN_SAFE_INTEGER, Number.MAX_SAFE_INTEGER)),
  presence_penalty: nullable(number(-2, 2)),
  frequency_penalty: nullable(number(-2, 2)),
  logit_bias: nullable(map(matches(/^\d{1,10}$/, "a token id"), number(-100, 100), 1024)),
  user: text(256),
  // OpenAI's key for prompt caching: the relay keeps one key's requests on one replica.
  prompt_cache_key: text(256),
  metadata: nullable(map(text(64), text(512), 16)),
  store: nullable(bool),
  service_tier: nullable(text(64)),
};

const contentPart = shape({ type: text(64), text: text() }, ["type"]);
const toolCall = shape({ id: text(256), type: text(64), function: shape({ name: text(256), arguments: text() }) });

const message = shape(
  {
    role: oneOf("system", "developer", "user", "assistant", "tool", "function"),
    content: nullable(either("a string or an array of content parts", text(), list(contentPart, 0, 1024))),
    name: text(256),
    tool_call_id: text(256),
    tool_calls: list(toolCall, 0, 128),
    refusal: nullable(text()),
  },
  ["role"],
);

const functionSpec = shape({ name: functionName, description: text(), parameters: anyObject, strict: nullable(bool) }, ["name"]);

const responseFormat = shape(
  {
    type: oneOf("text", "json_object", "json_schema"),
    json_schema: shape({ name: functionName, description: text(), schema: anyObject, strict: nullable(bool) }, ["name"]),
  },
  ["type"],
);

const chat: Record<string, Check> = {
  ...common,
  messages: list(message, 1, 4096),
  logprobs: nullable(bool),
  top_logprobs: nullable(integer(0, 20)),
  tools: list(shape({ type: oneOf("function"), function: functionSpec }, ["type", "function"]), 0, 128),
  tool_choice: either(
    "none, auto, required or a named function",
    oneOf("none", "auto", "required"),
    shape({ type: oneOf("function"), function: shape({ name: functionName }, ["name"]) }, ["type", "function"]),
  ),
  parallel_tool_calls: nullable(bool),
  functions: list(functionSpec, 0, 128),
  function_call: either("none, auto or a named function", oneOf("none", "auto"), shape({ name: functionName }, ["name"])),
  response_format: responseFormat,
  modalities: nullable(list(text(32), 0, 8)),
  reasoning_effort: nullable(text(32)),
};

const completion: Record<string, Check> = {
  ...common,
  prompt: either(
    "a string, an array of strings, or token ids",
    text(),
    list(text(), 1, 2048),
    list(tokenId, 1, 1 << 20),
    list(list(tokenId, 1, 1 << 20), 1, 2048),
  ),
  suffix: nullable(text()),
  echo: nullable(bool),
  best_of: nullable(integer(1, 20)),
  logprobs: nullable(integer(0, 5)),
};

/** An input to embed: OpenAI refuses an empty one, and so does every engine. */
const embeddingInput: Check = (v, p) => {
  text()(v, p);
  if (v === "") throw new RequestError(p, `${p}: must not be empty`);
};

/** Embeddings: never streamed, so none of the sampling fields. */
const embeddings: Record<string, Check> = {
  model: text(256),
  input: either("a non-empty string or an array of 1 to 2048 of them", embeddingInput, list(embeddingInput, 1, 2048)),
  encoding_format: oneOf("float", "base64"),
  dimensions: integer(1, 65_536),
  user: text(256),
};

const tables: Record<RequestKind, { fields: Record<string, Check>; required: string }> = {
  chat: { fields: chat, required: "messages" },
  completion: { fields: completion, required: "prompt" },
  embeddings: { fields: embeddings, required: "input" },
};

/** The kind a body is for when the caller did not say: chat when it has "messages". */
export function inferKind(body: Record<string, unknown>): RequestKind {
  return Array.isArray(body.messages) ? "chat" : "completion";
}

/**
 * The body of a `kind` request, checked, as the JSON to send on: parsed and serialised again, so
 * the runtime reads exactly what was checked (no duplicate keys, byte order mark or number
 * another parser reads differently), without `model`. `source`: the bytes, or the object
 * parseJsonObject already read from them. Throws RequestError.
 */
export function checkedRequest(
  source: Uint8Array | Record<string, unknown>,
  kind: RequestKind | undefined,
): { kind: RequestKind; json: string; body: Record<string, unknown> } {
  const body = source instanceof Uint8Array ? parseJsonObject(source) : source;
  const resolved = kind ?? inferKind(body);
  const table = tables[resolved];
  checkFields(body, table.fields, [table.required]);
  const { model: _, ...rest } = body;
  return { kind: resolved, json: JSON.stringify(rest), body: rest };
}
