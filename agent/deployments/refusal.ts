// How a runtime's failure is told to the control plane: a Connect code name and a message the
// contract accepts (ReplyError.message: at most 256 bytes of UTF-8, no control characters, no
// unpaired surrogates; a message beyond that would be refused at the server's edge and leave the
// caller waiting for its deadline). Pure.
import { OpenAiClientError } from "../engines/openai-client.js";

const maxMessageBytes = 256;

/** A runtime's HTTP refusal as a Connect code name: its 4xx are the caller's request, not our fault. */
export function refusalCode(err: unknown): string {
  if (err instanceof OpenAiClientError) {
    if (err.status === 429 || err.status === 503) return "resource_exhausted";
    if (err.status === 408) return "deadline_exceeded";
    // A runtime that wants credentials or refuses us is misconfigured here: ours to fix.
    if (err.status === 401 || err.status === 403 || err.status === 407) return "internal";
    if (err.status >= 400 && err.status < 500) return "invalid_argument";
    return "internal";
  }
  if (err instanceof Error && (err.name === "TimeoutError" || err.name === "AbortError")) return "deadline_exceeded";
  // Nothing listens on the runtime's port: it died and the agent has not yet seen it exit. The
  // request never reached it, so the control plane may move it to another replica.
  if ((err as { code?: unknown } | undefined)?.code === "ECONNREFUSED") return "unavailable";
  return "internal";
}

/** The message for a failure: the runtime's own words for a refusal, made to fit the contract. */
export function refusalMessage(err: unknown): string {
  const said =
    err instanceof OpenAiClientError ? `the runtime refused the request: ${err.message}` : `the runtime failed: ${(err as Error).message}`;
  return fitMessage(said);
}

/** Control characters become spaces, unpaired surrogates U+FFFD, and the text is cut to 256 bytes on a character boundary. */
export function fitMessage(text: string): string {
  let out = text.replace(/[\u0000-\u001f\u007f-\u009f]/g, " ");
  out = (out as string & { toWellFormed(): string }).toWellFormed();
  if (Buffer.byteLength(out) <= maxMessageBytes) return out;
  const cut = Buffer.from(out)
    .subarray(0, maxMessageBytes - 3)
    .toString("utf8");
  // A cut inside a character leaves a replacement character: drop it.
  return `${cut.replace(/\uFFFD$/, "")}...`;
}
