// A mistake in how the CLI was called. Printed as "error: <message>" with exit code 2. Its own
// module because both argument parsing and the client raise it.
export class UsageError extends Error {
  override name = "UsageError";
  /** The help text to point at, e.g. "forge nodes list --help". */
  constructor(
    message: string,
    readonly helpHint?: string,
  ) {
    super(message);
  }
}
