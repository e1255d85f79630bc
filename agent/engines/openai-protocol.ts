// The OpenAI-compatible wire shapes every engine speaks, and the pure rules that turn an untrusted
// request body into a bounded generation request. The llama.cpp worker serves these shapes; the
// agent's one client reads them from any engine.

export const limits = {
  /** Request bodies larger than this are refused before parsing. */
  bodyBytes: 1024 * 1024,
  maxTokensDefault: 16,
  maxTokensCeiling: 4096,
  messages: 256,
  stops: 4,
  stopChars: 64,
} as const;

export type FinishReason = "stop" | "length";

export interface ChatMessage {
  role: "system" | "user" | "assistant";
  content: string;
}

interface SamplingRequest {
  /** The model id the caller asked for, if any; the server checks it against what it serves. */
  model: string | undefined;
  maxTokens: number;
  /** 0 means greedy: the same prompt gives the same tokens. */
  temperature: number;
  seed: number | undefined;
  stop: string[];
  stream: boolean;
  /** OpenAI's stream_options.include_usage: a last chunk carries the usage. */
  includeUsage: boolean;
  /** vLLM's stream_options.continuous_usage_stats: every chunk carries the usage so far. */
  continuousUsage: boolean;
}

export type GenerationRequest =
  | (SamplingRequest & { kind: "completion"; prompt: string })
  | (SamplingRequest & { kind: "chat"; messages: ChatMessage[] });

export interface Usage {
  prompt_tokens: number;
  completion_tokens: number;
  total_tokens: number;
}

/** Measured by the engine (llama-server reports the same figures under the same name). */
export interface Timings {
  prompt_n: number;
  /** From the start of the request's evaluation to the first generated token. */
  prompt_ms: number;
  predicted_n: number;
  /** From the first generated token to the last. */
  predicted_ms: number;
  predicted_per_second: number;
}

export interface CompletionResponse {
  id: string;
  object: "text_completion";
  created: number;
  model: string;
  choices: { index: number; text: string; finish_reason: FinishReason | null; logprobs: null }[];
  usage?: Usage;
  timings?: Timings;
}

export interface ChatCompletionResponse {
  id: string;
  object: "chat.completion";
  created: number;
  model: string;
  choices: { index: number; message: { role: "assistant"; content: string }; finish_reason: FinishReason }[];
  usage: Usage;
  timings?: Timings;
}

export interface ChatCompletionChunk {
  id: string;
  object: "chat.completion.chunk";
  created: number;
  model: string;
  choices: { index: number; delta: { role?: "assistant"; content?: string }; finish_reason: FinishReason | null }[];
  usage?: Usage;
  timings?: Timings;
}

export interface ModelList {
  object: "list";
  data: { id: string; object: "model"; created: number; owned_by: string }[];
}

export type ErrorType = "invalid_request_error" | "not_found_error" | "rate_limit_error" | "server_error";

export interface ErrorBody {
  error: { message: string; type: ErrorType; param: string | null; code: string | null };
}

/** A refusal with its HTTP status, rendered in OpenAI's error shape. */
export class OpenAiError extends Error {
  constructor(
    readonly status: number,
    readonly type: ErrorType,
    readonly code: string,
    message: string,
    readonly param: string | null = null,
  ) {
    super(message);
    this.name = "OpenAiError";
  }

  body(): ErrorBody {
    return { error: { message: this.message, type: this.type, param: this.param, code: this.code } };
  }
}

const invalid = (param: string, message: string) => new OpenAiError(400, "invalid_request_error", "invalid_value", message, param);

/** Validates a POST /v1/completions body. Only a single string prompt is supported. */
export function parseCompletionRequest(body: unknown): GenerationRequest {
  const o = object(body);
  if (typeof o.prompt !== "string") throw invalid("prompt", "prompt must be a string");
  return { kind: "completion", prompt: o.prompt, ...sampling(o) };
}

/** Validates a POST /v1/chat/completions body: text messages from system, user and assistant. */
export function parseChatRequest(body: unknown): GenerationRequest {
  const o = object(body);
  if (!Array.isArray(o.messages) || o.messages.length === 0) throw invalid("messages", "messages must be a non-empty array");
  if (o.messages.length > limits.messages) throw invalid("messages", `at most ${limits.messages} messages`);
  const messages = o.messages.map((m: unknown, i: number): ChatMessage => {
    const msg = m !== null && typeof m === "object" ? (m as Record<string, unknown>) : {};
    if (msg.role !== "system" && msg.role !== "user" && msg.role !== "assistant") {
      throw invalid(`messages[${i}].role`, "role must be system, user or assistant");
    }
    if (typeof msg.content !== "string") throw invalid(`messages[${i}].content`, "content must be a string");
    return { role: msg.role, content: msg.content };
  });
  return { kind: "chat", messages, ...sampling(o) };
}

function object(body: unknown): Record<string, unknown> {
  if (body === null || typeof body !== "object" || Array.isArray(body)) throw invalid("body", "the body must be a JSON object");
  return body as Record<string, unknown>;
}

function sampling(o: Record<string, unknown>): SamplingRequest {
  if (o.model !== undefined && typeof o.model !== "string") throw invalid("model", "model must be a string");
  const maxTokens = o.max_tokens ?? o.max_completion_tokens ?? limits.maxTokensDefault;
  if (!Number.isInteger(maxTokens) || (maxTokens as number) < 1 || (maxTokens as number) > limits.maxTokensCeiling) {
    throw invalid("max_tokens", `max_tokens must be an integer from 1 to ${limits.maxTokensCeiling}`);
  }
  const temperature = o.temperature ?? 1;
  if (typeof temperature !== "number" || !(temperature >= 0 && temperature <= 2)) {
    throw invalid("temperature", "temperature must be a number from 0 to 2");
  }
  if (o.seed !== undefined && (!Number.isInteger(o.seed) || (o.seed as number) < 0 || (o.seed as number) > 0xffffffff)) {
    throw invalid("seed", "seed must be an unsigned 32-bit integer");
  }
  const stop = o.stop === undefined || o.stop === null ? [] : typeof o.stop === "string" ? [o.stop] : o.stop;
  if (
    !Array.isArray(stop) ||
    stop.length > limits.stops ||
    !stop.every((s) => typeof s === "string" && s.length > 0 && s.length <= limits.stopChars)
  ) {
    throw invalid("stop", `stop must be a string or up to ${limits.stops} non-empty strings of at most ${limits.stopChars} characters`);
  }
  if (o.stream !== undefined && typeof o.stream !== "boolean") throw invalid("stream", "stream must be a boolean");
  const options = o.stream_options;
  const asked = options !== null && typeof options === "object" ? (options as Record<string, unknown>) : {};
  const includeUsage = asked.include_usage === true;
  return {
    model: o.model as string | undefined,
    maxTokens: maxTokens as number,
    temperature,
    seed: o.seed as number | undefined,
    stop: stop as string[],
    stream: o.stream === true,
    includeUsage,
    continuousUsage: includeUsage && asked.continuous_usage_stats === true,
  };
}

/** Bounds of one POST /v1/embeddings: inputs per request and characters per input. */
export const embeddingLimits = { inputs: 256, inputChars: 32_768 } as const;

export interface EmbeddingRequest {
  model: string | undefined;
  inputs: string[];
  /** float: arrays of numbers; base64: little-endian float32s, as the OpenAI SDKs ask by default. */
  encoding: "float" | "base64";
}

export interface EmbeddingResponse {
  object: "list";
  data: { object: "embedding"; index: number; embedding: number[] | string }[];
  model: string;
  usage: { prompt_tokens: number; total_tokens: number };
}

/** Validates a POST /v1/embeddings body: `input` is a non-empty string or an array of them, bounded. */
export function parseEmbeddingRequest(body: unknown): EmbeddingRequest {
  const o = object(body);
  if (o.model !== undefined && typeof o.model !== "string") throw invalid("model", "model must be a string");
  const inputs = typeof o.input === "string" ? [o.input] : o.input;
  const { inputs: most, inputChars } = embeddingLimits;
  if (!Array.isArray(inputs) || inputs.length === 0 || inputs.length > most) {
    throw invalid("input", `input must be a string or an array of 1 to ${most} strings`);
  }
  if (!inputs.every((s) => typeof s === "string" && s.length > 0 && s.length <= inputChars)) {
    throw invalid("input", `each input must be a non-empty string of at most ${inputChars} characters`);
  }
  const encoding = o.encoding_format ?? "float";
  if (encoding !== "float" && encoding !== "base64") throw invalid("encoding_format", "encoding_format must be float or base64");
  return { model: o.model as string | undefined, inputs: inputs as string[], encoding };
}
