// A mistake in how the CLI was called. Printed as "error: <message>" with exit code 2. Its own
// module because argument parsing, the client and sign-in raise it.
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

/** A configuration problem that is not the user's syntax: exit 2 as well, but phrased differently. */
export class ConfigError extends UsageError {
  override name = "ConfigError";
}
