// A runtime's answer as an OpenAI client sees it, pure: named by the deployment, never by the
// runtime's id. (Usage a stream's client did not ask for is already gone: the relay strips it.)

/**
 * A whole answer or one stream chunk with its `model` renamed; undefined when it is not a JSON
 * object. `answer`: the object the relay already read from the payload, when it did.
 */
export function renamed(piece: { payload: Uint8Array; answer?: Record<string, unknown> }, deployment: string): string | undefined {
  const answer = piece.answer ?? parseObject(piece.payload);
  return answer === undefined ? undefined : JSON.stringify({ ...answer, model: deployment });
}

function parseObject(payload: Uint8Array): Record<string, unknown> | undefined {
  let answer: unknown;
  try {
    answer = JSON.parse(Buffer.from(payload).toString("utf8"));
  } catch {
    return undefined;
  }
  return typeof answer === "object" && answer !== null && !Array.isArray(answer) ? (answer as Record<string, unknown>) : undefined;
}
