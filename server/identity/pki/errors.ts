/** The node's certificate signing request is unacceptable; safe to report back to the caller. */
export class CsrError extends Error {
  override readonly name = "CsrError";
}

/** A file in the CA directory exists but cannot be used; the operator has to look at it. */
export class CaFileError extends Error {
  override readonly name = "CaFileError";
  constructor(
    readonly file: string,
    reason: string,
  ) {
    // Keep it to one line so it reads well in logs and CLI output.
    super(`certificate authority in ${file} is damaged: ${oneLine(reason)}`);
  }
}

export function oneLine(text: string): string {
  return text.replace(/\s*\n\s*/g, "; ").trim();
}

export function errorMessage(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}
