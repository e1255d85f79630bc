// llama-server's answer as the request asked for it, pure: a chat that offered tools gets the calls
// the model wrote as `tool_calls` (whole, or as `delta.tool_calls` in a stream), a completion that
// asked for logprobs gets them in the legacy completions shape, and a stream's usage comes in a
// chunk of its own with no choices, as OpenAI sends it. Anything else passes as it is.
import { randomBytes } from "node:crypto";
import type { Prepared } from "./request.js";
import { parseToolCall } from "./tool-calls.js";

type Json = Record<string, unknown>;
type Choice = Json & { index?: number; finish_reason?: unknown; logprobs?: unknown };

const callId = () => `call_${randomBytes(12).toString("base64url")}`;

/** A whole answer (a JSON object) rewritten as the request asked. */
export function shapeAnswer(prepared: Prepared, answer: Json): Json {
  const choices = answer.choices;
  if (!Array.isArray(choices)) return answer;
  for (const choice of choices as Choice[]) {
    if (prepared.completionLogprobs) choice.logprobs = legacyLogprobs(choice.logprobs, 0).logprobs;
    const message = choice.message as Json | undefined;
    if (prepared.tools !== undefined && message !== undefined && typeof message.content === "string") {
      const call = parseToolCall(message.content, prepared.tools.functions);
      if (call !== undefined) {
        choice.message = { ...message, content: null, tool_calls: [{ id: callId(), type: "function", function: call }] };
        choice.finish_reason = "tool_calls";
      }
    }
  }
  return answer;
}

/**
 * A stream's chunks rewritten as the request asked. A chat that offered tools holds back the text
 * of a choice that may be a call (all of it when a call is required; from a leading "{" when the
 * model may answer either way) until the choice finishes, then sends it as one call or as the text
 * it was. Chunks of other requests pass through untouched.
 */
export class StreamShaper {
  private readonly held = new Map<number, { text: string; mode: "undecided" | "holding" | "passing" }>();
  private readonly offsets = new Map<number, number>();

  constructor(private readonly prepared: Prepared) {}

  /** Whether chunks need reading at all: false passes the runtime's bytes through as they are. */
  get active(): boolean {
    return this.prepared.tools !== undefined || this.prepared.completionLogprobs === true || this.prepared.runningUsage === true;
  }

  /** One chunk in; the chunks to send for it (none while text is held). */
  chunk(chunk: Json): Json[] {
    const choices = chunk.choices;
    if (!Array.isArray(choices) || choices.length === 0) return [chunk];
    const { usage, timings, ...rest } = chunk;
    if (usage !== undefined) {
      // llama-server's completions carry the usage on the last token chunk: OpenAI's is apart.
      const last = this.chunk(timings === undefined ? rest : { ...rest, timings });
      return [...last, { ...rest, choices: [], usage }];
    }
    chunk = rest;
    if (this.prepared.runningUsage && timings !== undefined) chunk.usage = usageOf(timings as Timings);
    if (this.prepared.completionLogprobs) {
      for (const choice of choices as Choice[]) {
        const index = choice.index ?? 0;
        const shaped = legacyLogprobs(choice.logprobs, this.offsets.get(index) ?? 0);
        choice.logprobs = shaped.logprobs;
        this.offsets.set(index, shaped.offset);
      }
    }
    if (this.prepared.tools === undefined) return [chunk];
    const passed = (choices as Choice[]).flatMap((choice) => this.toolChoice(choice));
    return passed.length > 0 ? [{ ...chunk, choices: passed }] : [];
  }

  /** A chat choice's chunk: held, released as text, or turned into a call when it finishes. */
  private toolChoice(choice: Choice): Choice[] {
    const index = choice.index ?? 0;
    const delta = (choice.delta ?? {}) as Json;
    let state = this.held.get(index);
    if (state === undefined) {
      // A required call is held from the start; under auto, the first text that is not blank tells.
      state = { text: "", mode: this.prepared.tools!.choice.kind === "auto" ? "undecided" : "holding" };
      this.held.set(index, state);
    }
    if (state.mode === "passing") return [choice];
    state.text += typeof delta.content === "string" ? delta.content : "";
    if (state.mode === "undecided") {
      const start = state.text.trimStart();
      if (start !== "") state.mode = start.startsWith("{") ? "holding" : "passing";
      if (state.mode === "passing") {
        const text = state.text;
        state.text = "";
        return [{ ...choice, delta: { ...delta, content: text } }];
      }
    }
    const role = delta.role !== undefined ? { role: delta.role } : {};
    if (choice.finish_reason === null || choice.finish_reason === undefined) {
      return delta.role !== undefined ? [{ ...choice, delta: role, finish_reason: null }] : [];
    }
    this.held.delete(index);
    const call = state.mode === "holding" ? parseToolCall(state.text, this.prepared.tools!.functions) : undefined;
    if (call !== undefined) {
      return [
        {
          ...choice,
          delta: { ...role, tool_calls: [{ index: 0, id: callId(), type: "function", function: call }] },
          finish_reason: "tool_calls",
        },
      ];
    }
    return [{ ...choice, delta: { ...role, content: state.text }, finish_reason: choice.finish_reason }];
  }
}

/** What llama-server's timings say of a request so far: the prompt (cached and evaluated) and the tokens generated. */
interface Timings {
  cache_n?: number;
  prompt_n?: number;
  predicted_n?: number;
}

function usageOf(t: Timings): Json {
  const count = (n: unknown) => (typeof n === "number" && Number.isSafeInteger(n) && n >= 0 ? n : 0);
  const cached = count(t.cache_n);
  const prompt = cached + count(t.prompt_n);
  const completion = count(t.predicted_n);
  return {
    prompt_tokens: prompt,
    completion_tokens: completion,
    total_tokens: prompt + completion,
    prompt_tokens_details: { cached_tokens: cached },
  };
}

/**
 * llama-server's logprobs of a completion (`content`: the chat shape) in the legacy completions
 * shape: tokens, their logprobs, the alternatives as token to logprob, and each token's offset in
 * the text (continuing from `offset`, for a stream).
 */
function legacyLogprobs(value: unknown, offset: number): { logprobs: unknown; offset: number } {
  const content = (value as { content?: unknown } | null | undefined)?.content;
  if (!Array.isArray(content)) return { logprobs: value ?? null, offset };
  const out = {
    tokens: [] as string[],
    token_logprobs: [] as number[],
    top_logprobs: [] as Record<string, number>[],
    text_offset: [] as number[],
  };
  let at = offset;
  for (const entry of content as { token?: unknown; logprob?: unknown; top_logprobs?: unknown }[]) {
    const token = typeof entry.token === "string" ? entry.token : "";
    out.tokens.push(token);
    out.token_logprobs.push(typeof entry.logprob === "number" ? entry.logprob : 0);
    const top: Record<string, number> = {};
    if (Array.isArray(entry.top_logprobs)) {
      for (const alt of entry.top_logprobs as { token?: unknown; logprob?: unknown }[]) {
        if (typeof alt.token === "string" && typeof alt.logprob === "number") top[alt.token] = alt.logprob;
      }
    }
    out.top_logprobs.push(top);
    out.text_offset.push(at);
    at += token.length;
  }
  return { logprobs: out, offset: at };
}
