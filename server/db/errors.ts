// Errors raised while opening the database or applying migrations. Each carries a single-line
// message meant for an operator: what failed, where (never a password), and the driver's cause.

/** Which backend an open error is about. */
export type DatabaseKind = "pglite" | "postgres";

/**
 * Opening the database failed: unreachable server, bad URL, damaged embedded data directory,
 * refused migration. `message` is one line and safe to log; `code` is the driver's error code
 * (errno name or SQLSTATE) when there is one.
 */
export class DatabaseOpenError extends Error {
  override readonly name = "DatabaseOpenError";
  readonly kind: DatabaseKind | undefined;
  readonly code: string | undefined;

  constructor(message: string, opts: { kind?: DatabaseKind; code?: string; cause?: unknown } = {}) {
    super(oneLine(message), opts.cause === undefined ? undefined : { cause: opts.cause });
    this.kind = opts.kind;
    this.code = opts.code;
  }
}

/**
 * The migrator refused to proceed or a migration failed. `migration` names the migration
 * directory concerned, when there is one.
 */
export class MigrationError extends Error {
  override readonly name = "MigrationError";
  readonly migration: string | undefined;

  constructor(message: string, migration?: string, cause?: unknown) {
    super(oneLine(message), cause === undefined ? undefined : { cause });
    this.migration = migration;
  }
}

/** Collapses whitespace runs containing newlines so a message stays on one line. */
export function oneLine(text: string): string {
  return text.replace(/\s*[\r\n]+\s*/g, " ").trim();
}

/**
 * The most useful one-line text of a driver error. Node reports a failed connection to a host
 * name with several addresses as an AggregateError whose own message is empty, so its inner
 * errors are used instead.
 */
export function describeCause(err: unknown): string {
  if (err instanceof AggregateError && err.errors.length > 0) {
    const inner = [...new Set(err.errors.map((e) => describeCause(e)))];
    if (!err.message) return inner.join("; ");
    return `${err.message} (${inner.join("; ")})`;
  }
  if (err instanceof Error) {
    const code = errorCode(err);
    if (err.message) return oneLine(err.message);
    return code ?? err.name;
  }
  return oneLine(String(err));
}

/** The errno name or SQLSTATE of a driver error, if it has one. */
export function errorCode(err: unknown): string | undefined {
  if (err instanceof AggregateError) {
    for (const e of err.errors) {
      const c = errorCode(e);
      if (c) return c;
    }
  }
  if (typeof err === "object" && err !== null && "code" in err) {
    const code = (err as { code: unknown }).code;
    if (typeof code === "string" && code.length > 0) return code;
  }
  return undefined;
}
