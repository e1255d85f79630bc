// Opens the control plane's database: a real PostgreSQL server when a URL is given
// (./postgres.ts), otherwise PGlite stored under <dataDir>/pglite (./pglite.ts). Either way the
// committed migrations are applied (./migrate.ts) and connectivity is checked before the Database
// is handed out, and any failure is one DatabaseOpenError line that never contains a password.
import type { Database, OpenDatabaseOptions } from "./database.js";
import { openPglite } from "./pglite.js";
import { openPostgres } from "./postgres.js";

export { DatabaseOpenError } from "./errors.js";
export type { Database, OpenDatabaseOptions } from "./database.js";

/** Opens, migrates and checks the database. Throws DatabaseOpenError (one line) on failure. */
export async function openDatabase(opts: OpenDatabaseOptions): Promise<Database> {
  const url = opts.databaseUrl?.trim();
  if (url) return openPostgres(url, opts);
  return openPglite(opts);
}
