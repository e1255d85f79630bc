// A runtime's answer as the client sees it, pure: named by the deployment (never the runtime's id)
// and, in a stream, without the usage the client did not ask for (the front door always asks the
// runtime for it, to count what was delivered).

export interface Usage {
  promptTokens: number;
  completionTokens: number;
}

/** A whole (unary) answer: its model renamed; its usage read. Undefined when the runtime's answer is not a JSON object. */
export function unaryAnswer(payload: Uint8Array, deployment: string): { body: string; usage: Usage | undefined } | undefined {
  const answer = parseObject(payload);
  if (answer === undefined) return undefined;
  answer.model = deployment;
  return { body: JSON.stringify(answer), usage: usageOf(answer.usage) };
}

/**
 * One stream chunk: its model renamed, its usage read, and dropped from what the client sees
 * unless asked (a usage-only chunk, with no choices, is then not sent at all: `data` undefined).
 */
export function streamChunk(
  payload: Uint8Array,
  deployment: string,
  includeUsage: boolean,
): { data: string | undefined; usage: Usage | undefined } | undefined {
  const chunk = parseObject(payload);
  if (chunk === undefined) return undefined;
  const usage = usageOf(chunk.usage);
  chunk.model = deployment;
  if (!includeUsage) {
    delete chunk.usage;
    if (usage !== undefined && Array.isArray(chunk.choices) && chunk.choices.length === 0) return { data: undefined, usage };
  }
  return { data: JSON.stringify(chunk), usage };
}

function parseObject(payload: Uint8Array): Record<string, unknown> | undefined {
  try {
    const v: unknown = JSON.parse(Buffer.from(payload).toString("utf8"));
    return typeof v === "object" && v !== null && !Array.isArray(v) ? (v as Record<string, unknown>) : undefined;
  } catch {
    return undefined;
  }
}

function usageOf(v: unknown): Usage | undefined {
  if (typeof v !== "object" || v === null) return undefined;
  const u = v as Record<string, unknown>;
  const count = (n: unknown) => (typeof n === "number" && Number.isSafeInteger(n) && n >= 0 ? n : 0);
  return { promptTokens: count(u.prompt_tokens), completionTokens: count(u.completion_tokens) };
}
