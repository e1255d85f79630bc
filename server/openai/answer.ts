// A runtime's answer as an OpenAI client sees it, pure: named by the deployment, never by the
// runtime's id. (Usage a stream's client did not ask for is already gone: the relay strips it.)

/** A whole answer or one stream chunk with its `model` renamed; undefined when it is not a JSON object. */
export function renamed(payload: Uint8Array, deployment: string): string | undefined {
  let answer: unknown;
  try {
    answer = JSON.parse(Buffer.from(payload).toString("utf8"));
  } catch {
    return undefined;
  }
  if (typeof answer !== "object" || answer === null || Array.isArray(answer)) return undefined;
  return JSON.stringify({ ...answer, model: deployment });
}
