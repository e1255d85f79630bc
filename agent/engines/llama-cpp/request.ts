// What the built-in engine does with each field of an OpenAI request before llama-server gets it,
// pure. Every field it honours is checked and passed on in llama-server's terms; the few that
// change nothing here (a caller's `user` tag) are dropped; every other is refused with a 400 naming
// it, never ignored, since llama-server itself ignores a field it does not know. Tools become a
// system message and, when a call is required, a JSON schema the answer is held to (./tool-calls.ts).
// docs/serving.md lists the fields one by one.
import { OpenAiError } from "../openai-protocol.js";
import { checkJsonSchema, type JsonSchema } from "./json-schema.js";
import { toolCallSchema, toolInstructions, type ToolChoice, type ToolFunction } from "./tool-calls.js";

export const requestLimits = {
  /** A completion's max_tokens when it names none (OpenAI's default); a chat's runs to its end or its context. */
  completionMaxTokensDefault: 16,
  /** The ceiling of max_tokens when the runtime's context is not known. */
  maxTokensCeiling: 1 << 20,
  choices: 16,
  messages: 1024,
  stops: 4,
  stopChars: 64,
  tools: 64,
  logitBias: 1024,
  topLogprobs: 20,
  completionLogprobs: 5,
  embeddingInputs: 256,
  embeddingInputChars: 32_768,
} as const;

/** A request as llama-server takes it, and how its answer is read back (tools, legacy logprobs). */
export interface Prepared {
  body: Record<string, unknown>;
  /** Read the answer's text as tool calls (a chat that offered tools). */
  tools?: { functions: ToolFunction[]; choice: ToolChoice };
  /** Rewrite the answer's logprobs in the legacy completions shape. */
  completionLogprobs?: boolean;
  /** Give each stream chunk the usage so far (vLLM's continuous_usage_stats), from llama-server's timings. */
  runningUsage?: boolean;
}

const invalid = (param: string, message: string) =>
  new OpenAiError(400, "invalid_request_error", "invalid_value", `${param}: ${message}`, param);
const unsupported = (param: string, message: string) =>
  new OpenAiError(400, "invalid_request_error", "unsupported_parameter", `${param}: ${message}`, param);

/** Fields that change nothing here: a caller's tag, metadata for a log, the routing hint the control plane already used. */
const ignored = new Set(["user", "metadata", "prompt_cache_key"]);
const sampling = [
  "model",
  "max_tokens",
  "max_completion_tokens",
  "temperature",
  "top_p",
  "top_k",
  "min_p",
  "n",
  "seed",
  "presence_penalty",
  "frequency_penalty",
  "repeat_penalty",
  "logit_bias",
  "stop",
  "stream",
  "stream_options",
  "logprobs",
  "response_format",
  "store",
  "service_tier",
];
const chatFields = new Set([...sampling, "messages", "top_logprobs", "tools", "tool_choice", "parallel_tool_calls"]);
const completionFields = new Set([...sampling, "prompt", "echo", "best_of", "suffix"]);
const embeddingFields = new Set(["model", "input", "encoding_format", "dimensions"]);

/** What a request is checked against: the tokens a sequence holds (max_tokens cannot pass them). */
export interface RuntimeLimits {
  contextSize?: number | undefined;
}

/** A POST /v1/completions body: one string prompt. */
export function prepareCompletion(raw: unknown, limits: RuntimeLimits = {}): Prepared {
  const o = object(raw);
  refuseUnknown(o, completionFields);
  if (typeof o.prompt !== "string") throw invalid("prompt", "must be a string (one prompt per request)");
  if (!absentOr(o.echo, false)) throw unsupported("echo", "the prompt is never echoed here");
  if (!absentOr(o.best_of, 1)) throw unsupported("best_of", "only 1 is supported");
  if (!absentOr(o.suffix, "")) throw unsupported("suffix", "insertion before a suffix is not supported");
  const body: Record<string, unknown> = { prompt: o.prompt, ...commonOf(o, requestLimits.completionMaxTokensDefault, limits) };
  const prepared: Prepared = { body, ...runningUsageOf(o, body) };
  const logprobs = o.logprobs ?? null;
  if (logprobs !== null) {
    if (!Number.isInteger(logprobs) || (logprobs as number) < 0 || (logprobs as number) > requestLimits.completionLogprobs) {
      throw invalid("logprobs", `must be an integer from 0 to ${requestLimits.completionLogprobs}`);
    }
    // llama-server's n_probs: the chosen token's, and this many alternatives each.
    body.n_probs = Math.max(1, logprobs as number);
    prepared.completionLogprobs = true;
  }
  return prepared;
}

/**
 * A stream that asked for the usage in every chunk (vLLM's continuous_usage_stats, which the
 * control plane asks for to count a stream cut short exactly): llama-server's per-token timings
 * carry the counts, and the answer's reader turns them into usage.
 */
function runningUsageOf(o: Record<string, unknown>, body: Record<string, unknown>): { runningUsage?: true } {
  const options = o.stream_options as Record<string, unknown> | null | undefined;
  if (body.stream !== true || typeof options !== "object" || options === null || options.continuous_usage_stats !== true) return {};
  body.timings_per_token = true;
  return { runningUsage: true };
}

/** A POST /v1/chat/completions body. */
export function prepareChat(raw: unknown, limits: RuntimeLimits = {}): Prepared {
  const o = object(raw);
  refuseUnknown(o, chatFields);
  if (!Array.isArray(o.messages) || o.messages.length === 0) throw invalid("messages", "must be a non-empty array");
  if (o.messages.length > requestLimits.messages) throw invalid("messages", `at most ${requestLimits.messages}`);
  const body: Record<string, unknown> = commonOf(o, undefined, limits);
  const logprobs = o.logprobs ?? false;
  if (typeof logprobs !== "boolean") throw invalid("logprobs", "must be a boolean");
  const top = o.top_logprobs ?? 0;
  if (!Number.isInteger(top) || (top as number) < 0 || (top as number) > requestLimits.topLogprobs) {
    throw invalid("top_logprobs", `must be an integer from 0 to ${requestLimits.topLogprobs}`);
  }
  if ((top as number) > 0 && !logprobs) throw invalid("top_logprobs", "needs logprobs: true");
  if (logprobs) Object.assign(body, { logprobs: true, top_logprobs: top });
  const functions = toolsOf(o.tools);
  const choice = toolChoiceOf(o.tool_choice, functions);
  if (o.parallel_tool_calls !== undefined && typeof o.parallel_tool_calls !== "boolean")
    throw invalid("parallel_tool_calls", "must be a boolean");
  const offered = functions.length > 0 && choice.kind !== "none";
  if (offered && body.response_format !== undefined) {
    throw unsupported("response_format", "a response format and tools cannot be asked for together");
  }
  body.messages = messagesOf(o.messages, offered ? toolInstructions(functions, choice) : "");
  const running = runningUsageOf(o, body);
  if (!offered) return { body, ...running };
  const schema = toolCallSchema(functions, choice);
  if (schema !== undefined) body.response_format = { type: "json_schema", json_schema: { name: "tool_call", schema } };
  return { body, tools: { functions, choice }, ...running };
}

/** A POST /v1/embeddings body. */
export function prepareEmbeddings(raw: unknown): Prepared {
  const o = object(raw);
  refuseUnknown(o, embeddingFields);
  if (o.model !== undefined && typeof o.model !== "string") throw invalid("model", "must be a string");
  const input = o.input;
  const inputs = typeof input === "string" ? [input] : input;
  if (!Array.isArray(inputs) || inputs.length === 0 || inputs.length > requestLimits.embeddingInputs) {
    throw invalid("input", `must be a string or an array of 1 to ${requestLimits.embeddingInputs} strings`);
  }
  if (!inputs.every((s) => typeof s === "string")) throw unsupported("input", "only strings (no token arrays)");
  if (!inputs.every((s) => s.length > 0 && s.length <= requestLimits.embeddingInputChars)) {
    throw invalid("input", `each input must be a non-empty string of at most ${requestLimits.embeddingInputChars} characters`);
  }
  const encoding = o.encoding_format ?? "float";
  if (encoding !== "float" && encoding !== "base64") throw invalid("encoding_format", "must be float or base64");
  if (o.dimensions !== undefined && o.dimensions !== null) throw unsupported("dimensions", "the model's own dimensions only");
  return { body: { input, encoding_format: encoding } };
}

function object(body: unknown): Record<string, unknown> {
  if (body === null || typeof body !== "object" || Array.isArray(body)) throw invalid("body", "must be a JSON object");
  return body as Record<string, unknown>;
}

const absentOr = (v: unknown, neutral: unknown) => v === undefined || v === null || v === neutral;

function refuseUnknown(o: Record<string, unknown>, known: ReadonlySet<string>): void {
  for (const key of Object.keys(o)) {
    if (!known.has(key) && !ignored.has(key)) throw unsupported(printable(key), "is not supported by the llama.cpp engine");
  }
}

/** A caller's field name as a message may quote it. */
const printable = (key: string) => key.replace(/[^\x20-\x7e]/g, "?").slice(0, 64);

/** The fields of both generation APIs, checked and in llama-server's terms. */
function commonOf(o: Record<string, unknown>, maxTokensDefault: number | undefined, limits: RuntimeLimits): Record<string, unknown> {
  if (o.model !== undefined && typeof o.model !== "string") throw invalid("model", "must be a string");
  if (!absentOr(o.store, false)) throw unsupported("store", "completions are never stored here");
  if (!absentOr(o.service_tier, "auto") && o.service_tier !== "default") throw unsupported("service_tier", "only auto or default");
  if (o.stream !== undefined && o.stream !== null && typeof o.stream !== "boolean") throw invalid("stream", "must be a boolean");
  const n = o.n ?? 1;
  if (!Number.isInteger(n) || (n as number) < 1 || (n as number) > requestLimits.choices) {
    throw invalid("n", `must be an integer from 1 to ${requestLimits.choices}`);
  }
  const body: Record<string, unknown> = { stream: o.stream === true };
  if (n !== 1) body.n = n;
  const maxTokens = o.max_tokens ?? o.max_completion_tokens ?? maxTokensDefault;
  if (maxTokens !== undefined && maxTokens !== null) {
    // The prompt's tokens are llama-server's to count: it refuses a prompt that leaves no room.
    const ceiling = limits.contextSize ?? requestLimits.maxTokensCeiling;
    if (!Number.isInteger(maxTokens) || (maxTokens as number) < 1 || (maxTokens as number) > ceiling) {
      const why = limits.contextSize === undefined ? "" : " (the tokens a sequence holds, prompt included)";
      throw invalid("max_tokens", `must be an integer from 1 to ${ceiling}${why}`);
    }
    body.max_tokens = maxTokens;
  }
  const numbers: [field: string, min: number, max: number][] = [
    ["temperature", 0, 2],
    ["top_p", 0, 1],
    ["min_p", 0, 1],
    ["presence_penalty", -2, 2],
    ["frequency_penalty", -2, 2],
    ["repeat_penalty", 0, 10],
  ];
  for (const [field, min, max] of numbers) {
    const v = o[field];
    if (v === undefined || v === null) continue;
    if (typeof v !== "number" || !(v >= min && v <= max)) throw invalid(field, `must be a number from ${min} to ${max}`);
    body[field] = v;
  }
  // llama-server's defaults differ from OpenAI's: a request that names none samples at 1, as OpenAI does.
  body.temperature ??= 1;
  if (o.top_k !== undefined && o.top_k !== null) {
    if (!Number.isInteger(o.top_k) || (o.top_k as number) < 0 || (o.top_k as number) > 100_000) {
      throw invalid("top_k", "must be an integer from 0 (off) to 100000");
    }
    body.top_k = o.top_k;
  }
  if (o.seed !== undefined && o.seed !== null) {
    if (!Number.isInteger(o.seed) || (o.seed as number) < 0 || (o.seed as number) > 0xffffffff) {
      throw invalid("seed", "must be an unsigned 32-bit integer");
    }
    body.seed = o.seed;
  }
  const bias = logitBiasOf(o.logit_bias);
  if (bias !== undefined) body.logit_bias = bias;
  const stop = stopsOf(o.stop);
  if (stop.length > 0) body.stop = stop;
  const format = responseFormatOf(o.response_format);
  if (format !== undefined) body.response_format = format;
  const options = o.stream_options;
  if (options !== undefined && options !== null) {
    if (typeof options !== "object" || Array.isArray(options)) throw invalid("stream_options", "must be an object");
    // continuous_usage_stats (vLLM's) is accepted and not honoured: the usage comes with the last chunk.
    body.stream_options = { include_usage: (options as Record<string, unknown>).include_usage === true };
  }
  return body;
}

/** OpenAI's token id to bias map, as llama-server reads it (the same shape), bounded. */
function logitBiasOf(value: unknown): Record<string, number> | undefined {
  if (value === undefined || value === null) return undefined;
  if (typeof value !== "object" || Array.isArray(value)) throw invalid("logit_bias", "must map token ids to numbers");
  const entries = Object.entries(value as Record<string, unknown>);
  if (entries.length > requestLimits.logitBias) throw invalid("logit_bias", `at most ${requestLimits.logitBias} tokens`);
  for (const [token, b] of entries) {
    if (!/^\d{1,10}$/.test(token) || typeof b !== "number" || !(b >= -100 && b <= 100)) {
      throw invalid("logit_bias", "maps token ids (integers, as strings) to numbers from -100 to 100");
    }
  }
  return entries.length === 0 ? undefined : (value as Record<string, number>);
}

function stopsOf(value: unknown): string[] {
  const stop = value === undefined || value === null ? [] : typeof value === "string" ? [value] : value;
  const { stops, stopChars } = requestLimits;
  if (!Array.isArray(stop) || stop.length > stops || !stop.every((s) => typeof s === "string" && s.length > 0 && s.length <= stopChars)) {
    throw invalid("stop", `must be a string or up to ${stops} non-empty strings of at most ${stopChars} characters`);
  }
  return stop as string[];
}

function responseFormatOf(value: unknown): Record<string, unknown> | undefined {
  if (value === undefined || value === null) return undefined;
  const f = value as Record<string, unknown>;
  if (typeof f !== "object" || Array.isArray(f)) throw invalid("response_format", "must be an object");
  if (f.type === "text") return undefined;
  if (f.type === "json_object") return { type: "json_object" };
  if (f.type !== "json_schema") throw unsupported("response_format.type", "must be text, json_object or json_schema");
  const spec = f.json_schema as Record<string, unknown> | undefined;
  if (spec === undefined || spec === null || typeof spec !== "object") throw invalid("response_format.json_schema", "is required");
  if (spec.schema === undefined) return { type: "json_object" };
  const schema: JsonSchema = checkJsonSchema(spec.schema, "response_format.json_schema.schema");
  return { type: "json_schema", json_schema: { name: typeof spec.name === "string" ? spec.name : "answer", schema } };
}

function textOf(value: unknown, param: string): string {
  if (typeof value === "string") return value;
  // Content as parts, as current SDKs send it: text parts only.
  if (Array.isArray(value)) {
    return value
      .map((part: unknown, i: number) => {
        const p = part as Record<string, unknown>;
        if (p === null || typeof p !== "object" || p.type !== "text" || typeof p.text !== "string") {
          throw unsupported(`${param}[${i}]`, "only text parts are supported (no images, audio or files)");
        }
        return p.text;
      })
      .join("");
  }
  throw invalid(param, "must be a string or an array of text parts");
}

/**
 * The conversation as llama-server renders it with the model's chat template: content as text; the
 * tools told in the first system message; an assistant turn that called tools as the JSON calls it
 * wrote; a tool's result as a user turn naming the call, so a conversation goes on after a call
 * whatever the template knows of tools.
 */
function messagesOf(raw: unknown[], instructions: string): { role: string; content: string }[] {
  const out = raw.map((m: unknown, i: number) => {
    const at = `messages[${i}]`;
    const msg = m !== null && typeof m === "object" ? (m as Record<string, unknown>) : {};
    switch (msg.role) {
      case "system":
      case "developer":
        return { role: "system", content: textOf(msg.content, `${at}.content`) };
      case "user":
        return { role: "user", content: textOf(msg.content, `${at}.content`) };
      case "assistant": {
        const calls = msg.tool_calls === undefined || msg.tool_calls === null ? [] : msg.tool_calls;
        if (!Array.isArray(calls)) throw invalid(`${at}.tool_calls`, "must be an array");
        const written = calls.map((c: unknown, k: number) => callText(c, `${at}.tool_calls[${k}]`));
        const content = msg.content === undefined || msg.content === null ? "" : textOf(msg.content, `${at}.content`);
        return { role: "assistant", content: [content, ...written].filter((s) => s !== "").join("\n") };
      }
      case "tool":
        if (typeof msg.tool_call_id !== "string" || msg.tool_call_id === "")
          throw invalid(`${at}.tool_call_id`, "a tool message names its call");
        return { role: "user", content: `Result of tool call ${msg.tool_call_id}:\n${textOf(msg.content, `${at}.content`)}` };
      default:
        throw invalid(`${at}.role`, "must be system, developer, user, assistant or tool");
    }
  });
  if (instructions === "") return out;
  if (out[0]?.role === "system") return [{ role: "system", content: `${out[0].content}\n\n${instructions}` }, ...out.slice(1)];
  return [{ role: "system", content: instructions }, ...out];
}

/** A call an assistant turn made, as the JSON the model is told to write. */
function callText(c: unknown, at: string): string {
  const call = (c ?? {}) as Record<string, unknown>;
  const fn = (call.function ?? {}) as Record<string, unknown>;
  if (call.type !== undefined && call.type !== "function") throw unsupported(`${at}.type`, "only function calls");
  if (typeof call.id !== "string" || typeof fn.name !== "string" || typeof fn.arguments !== "string") {
    throw invalid(at, "a tool call has an id, and a function with a name and arguments (JSON text)");
  }
  let args: unknown;
  try {
    args = JSON.parse(fn.arguments);
  } catch {
    throw invalid(`${at}.function.arguments`, "must be JSON text");
  }
  return JSON.stringify({ name: fn.name, arguments: args });
}

function toolsOf(value: unknown): ToolFunction[] {
  if (value === undefined || value === null) return [];
  if (!Array.isArray(value) || value.length > requestLimits.tools)
    throw invalid("tools", `must be an array of at most ${requestLimits.tools}`);
  const names = new Set<string>();
  return value.map((t: unknown, i: number) => {
    const tool = (t ?? {}) as Record<string, unknown>;
    if (tool.type !== "function") throw unsupported(`tools[${i}].type`, "only function tools are supported");
    const fn = (tool.function ?? {}) as Record<string, unknown>;
    if (typeof fn.name !== "string" || !/^[A-Za-z0-9_-]{1,64}$/.test(fn.name)) {
      throw invalid(`tools[${i}].function.name`, "a name of 1 to 64 letters, digits, _ or -");
    }
    if (names.has(fn.name)) throw invalid(`tools[${i}].function.name`, `${fn.name} is named twice`);
    names.add(fn.name);
    const parameters = fn.parameters === undefined ? { type: "object", properties: {} } : fn.parameters;
    return {
      name: fn.name,
      description: typeof fn.description === "string" ? fn.description.slice(0, 4096) : "",
      parameters: checkJsonSchema(parameters, `tools[${i}].function.parameters`),
    };
  });
}

function toolChoiceOf(value: unknown, tools: readonly ToolFunction[]): ToolChoice {
  if (value === undefined || value === null) return tools.length > 0 ? { kind: "auto" } : { kind: "none" };
  if (value === "none" || value === "auto" || value === "required") {
    if (value !== "none" && tools.length === 0) throw invalid("tool_choice", `${value} needs tools`);
    return { kind: value };
  }
  const named = (value as { function?: { name?: unknown } }).function?.name;
  if (typeof named !== "string" || !tools.some((t) => t.name === named)) throw invalid("tool_choice", "names a function in tools");
  return { kind: "function", name: named };
}
