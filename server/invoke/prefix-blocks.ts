// A prompt as the prefix index sees it: its text rendered in a fixed way (the chat's messages in
// order, or the completion's prompt), cut into fixed-size blocks whose hashes are chained, so that
// a block's hash names the whole prompt up to its end. Two prompts share a block hash exactly when
// (but for a collision, which only costs a routing preference) they share everything before it.
// Pure.

/** Characters per block: about 32 tokens of English, so a match is counted in steps of a few dozen tokens. */
export const blockChars = 128;
/** Blocks hashed per prompt at most (1 MiB of text): the request's size is bounded before, this bounds the work here. */
export const maxPromptBlocks = 8192;

/** 2^21: the second hash's bits go below the first's in one exact 53-bit number. */
const lowBits = 2 ** 21;

/**
 * The chained hashes of `text`'s whole blocks, in order. One pass of one running hash over every
 * character: at each block boundary its value is the block's hash, so chaining costs nothing.
 * Exact integers below 2^53, usable as Map keys without allocating strings.
 */
export function blockHashes(text: string): number[] {
  const blocks = Math.min(Math.floor(text.length / blockChars), maxPromptBlocks);
  const hashes = new Array<number>(blocks);
  const running = new PairHash();
  for (let block = 0; block < blocks; block++) hashes[block] = running.add(text, block * blockChars, (block + 1) * blockChars).value;
  return hashes;
}

/** A 53-bit hash of a short key (a session's `prompt_cache_key` or `user`): kept instead of the key itself. */
export function keyHash(key: string): number {
  return new PairHash().add(key, 0, key.length).value;
}

/** Two 32-bit FNV-style states (different primes and seeds) run side by side, read as one 53-bit number. */
class PairHash {
  private a = 0x811c9dc5;
  private b = 0x9747b28c;

  /** Mixes in the characters of `text` from `from` up to `to`. */
  add(text: string, from: number, to: number): this {
    let { a, b } = this;
    for (let at = from; at < to; at++) {
      const c = text.charCodeAt(at);
      a = Math.imul(a ^ c, 0x01000193);
      b = Math.imul(b ^ c, 0x5bd1e995);
      b ^= b >>> 15;
    }
    this.a = a;
    this.b = b;
    return this;
  }

  get value(): number {
    return (this.a >>> 0) * lowBits + (this.b >>> 11);
  }
}

// Separators no prompt text is told apart by: a role and its content, and one message from the next.
const roleEnd = "\u0001";
const messageEnd = "\u0002";

/**
 * The text a request's prompt is hashed from, or "" when it has none worth routing by
 * (embeddings). Not the model's chat template, which the control plane does not know: any fixed
 * rendering works, since only equal prefixes must render to equal prefixes.
 */
export function promptText(kind: "chat" | "completion" | "embeddings", body: Record<string, unknown>): string {
  if (kind === "chat") return chatText(body.messages);
  if (kind === "completion") return completionText(body.prompt);
  return "";
}

function chatText(messages: unknown): string {
  if (!Array.isArray(messages)) return "";
  let text = "";
  for (const m of messages as Record<string, unknown>[]) {
    text += `${String(m.role)}${roleEnd}${contentText(m.content)}`;
    if (m.name !== undefined) text += `${roleEnd}${String(m.name)}`;
    if (m.tool_call_id !== undefined) text += `${roleEnd}${String(m.tool_call_id)}`;
    if (m.tool_calls !== undefined) text += `${roleEnd}${JSON.stringify(m.tool_calls)}`;
    text += messageEnd;
  }
  return text;
}

function contentText(content: unknown): string {
  if (typeof content === "string") return content;
  if (!Array.isArray(content)) return "";
  let text = "";
  for (const part of content as Record<string, unknown>[]) {
    text += typeof part.text === "string" ? part.text : JSON.stringify(part);
    text += roleEnd;
  }
  return text;
}

function completionText(prompt: unknown): string {
  if (typeof prompt === "string") return prompt;
  // Several prompts are answered as several sequences: the first one stands for the request.
  if (Array.isArray(prompt) && typeof prompt[0] === "string") return prompt[0];
  // Token ids, rendered as their decimal list.
  if (Array.isArray(prompt) && typeof prompt[0] === "number") return prompt.join(",");
  if (Array.isArray(prompt) && Array.isArray(prompt[0])) return (prompt[0] as number[]).join(",");
  return "";
}
