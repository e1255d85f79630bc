// The OpenAI-compatible wire shapes every engine speaks (llama-server and any openai-http server),
// as the agent's one client reads them, and the error a request refused here is given in.

export type FinishReason = "stop" | "length" | "tool_calls";

/** A chat message as the agent's client sends it. */
export interface ChatMessage {
  role: "system" | "user" | "assistant";
  content: string;
}

export interface Usage {
  prompt_tokens: number;
  completion_tokens: number;
  total_tokens: number;
  /** Prompt tokens the runtime held already (a slot's prefix) and did not evaluate again. */
  prompt_tokens_details?: { cached_tokens: number };
}

/** One token's log-probability in a chat answer, in OpenAI's shape. */
export interface ChatLogprob {
  token: string;
  logprob: number;
  bytes: number[];
  top_logprobs: { token: string; logprob: number; bytes: number[] }[];
}

/** Log-probabilities of a completion's tokens, in the legacy completions shape. */
export interface CompletionLogprobs {
  tokens: string[];
  token_logprobs: number[];
  top_logprobs: Record<string, number>[];
  text_offset: number[];
}

/** A tool call in an answer (whole) or in a stream (`index`, and its parts). */
export interface ToolCallOut {
  index?: number;
  id: string;
  type: "function";
  function: { name: string; arguments: string };
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
  choices: { index: number; text: string; finish_reason: FinishReason | null; logprobs: CompletionLogprobs | null }[];
  usage?: Usage;
  timings?: Timings;
}

export interface ChatCompletionResponse {
  id: string;
  object: "chat.completion";
  created: number;
  model: string;
  choices: {
    index: number;
    message: { role: "assistant"; content: string | null; tool_calls?: ToolCallOut[] };
    finish_reason: FinishReason;
    logprobs: { content: ChatLogprob[] } | null;
  }[];
  usage: Usage;
  timings?: Timings;
}

export interface ChatCompletionChunk {
  id: string;
  object: "chat.completion.chunk";
  created: number;
  model: string;
  choices: {
    index: number;
    delta: { role?: "assistant"; content?: string; tool_calls?: ToolCallOut[] };
    finish_reason: FinishReason | null;
    logprobs?: { content: ChatLogprob[] } | null;
  }[];
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
