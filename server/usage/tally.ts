// What one request used, read from the runtime's answers as they pass through the relay, pure. A
// whole answer carries `usage`. A stream is asked for usage in every chunk (the tokens so far), and
// the client sees it only as it asked; so a stream cut short (the client went away, a deadline) is
// counted to its last delivered chunk, not to what the runtime might have gone on to generate. A
// runtime that sends usage only at the end (llama-server) leaves a cut stream counted by its token
// chunks instead.

export interface Tally {
  promptTokens: number;
  /** Of the prompt tokens, those the runtime reused from its cache (`usage.prompt_tokens_details.cached_tokens`). */
  cachedPromptTokens: number;
  completionTokens: number;
  /** Token chunks passed on so far. */
  delivered: number;
  /** The runtime's own count, once its usage arrived. */
  reported: boolean;
}

export const emptyTally = (): Tally => ({ promptTokens: 0, cachedPromptTokens: 0, completionTokens: 0, delivered: 0, reported: false });

/**
 * What to pass on of one answer piece, or nothing (a usage-only chunk the client did not ask for):
 * its bytes, and the JSON object they hold when they are one, so the OpenAI API names the answer
 * after its deployment without parsing it again. Bytes of an object changed here are written only
 * when read (a gRPC caller reads them; the OpenAI API writes its own).
 */
export type Passed = { readonly payload: Uint8Array; answer?: Record<string, unknown>; token: boolean } | undefined;

/**
 * Reads one piece into the tally and says what of it the caller gets. `stream`: the piece is one
 * stream chunk; `clientWants`: the usage to keep in what is passed on (the last chunk's, every one's).
 */
export function tallyPiece(tally: Tally, payload: Uint8Array, stream: boolean, clientWants: { last: boolean; every: boolean }): Passed {
  const answer = parseObject(payload);
  if (answer === undefined) return { payload, token: false };
  const usage = answer.usage;
  if (typeof usage === "object" && usage !== null) {
    const u = usage as Record<string, unknown>;
    tally.promptTokens = count(u.prompt_tokens);
    const details = u.prompt_tokens_details;
    const cached = typeof details === "object" && details !== null ? count((details as Record<string, unknown>).cached_tokens) : 0;
    // Never more than the prompt: a runtime's odd count cannot make reused tokens out of nothing.
    tally.cachedPromptTokens = Math.min(cached, tally.promptTokens);
    tally.completionTokens = count(u.completion_tokens);
    tally.reported = true;
  }
  if (!stream) return { payload, answer, token: false };
  const token = carriesToken(answer);
  if (token) tally.delivered += 1;
  const usageOnly = Array.isArray(answer.choices) && answer.choices.length === 0;
  if (!("usage" in answer) || clientWants.every || (usageOnly && clientWants.last)) return { payload, answer, token };
  if (usageOnly) return undefined;
  delete answer.usage;
  let written: Uint8Array | undefined;
  return {
    get payload() {
      written ??= Buffer.from(JSON.stringify(answer));
      return written;
    },
    answer,
    token,
  };
}

export interface RequestTokens {
  promptTokens: number;
  /** Of the prompt tokens, those reused from the runtime's cache. */
  cachedPromptTokens: number;
  completionTokens: number;
}

/** The request's tokens: the runtime's count when it gave one, else what was delivered. */
export function tokensOf(tally: Tally): RequestTokens {
  return tally.reported
    ? { promptTokens: tally.promptTokens, cachedPromptTokens: tally.cachedPromptTokens, completionTokens: tally.completionTokens }
    : { promptTokens: 0, cachedPromptTokens: 0, completionTokens: tally.delivered };
}

/** A chunk of generated text: a completion's `text`, or a chat delta's `content` (not the role-only opening chunk). */
function carriesToken(chunk: Record<string, unknown>): boolean {
  if (!Array.isArray(chunk.choices)) return false;
  return chunk.choices.some((c: unknown) => {
    if (typeof c !== "object" || c === null) return false;
    const choice = c as { text?: unknown; delta?: { content?: unknown; role?: unknown }; finish_reason?: unknown };
    if (choice.finish_reason !== null && choice.finish_reason !== undefined) return false;
    if (typeof choice.text === "string") return true;
    return typeof choice.delta?.content === "string" && !(choice.delta.role !== undefined && choice.delta.content === "");
  });
}

function parseObject(payload: Uint8Array): Record<string, unknown> | undefined {
  try {
    const v: unknown = JSON.parse(Buffer.from(payload).toString("utf8"));
    return typeof v === "object" && v !== null && !Array.isArray(v) ? (v as Record<string, unknown>) : undefined;
  } catch {
    return undefined;
  }
}

function count(n: unknown): number {
  return typeof n === "number" && Number.isSafeInteger(n) && n >= 0 ? n : 0;
}
