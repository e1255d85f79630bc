// A statement run straight on the driver (node-postgres' pool, or the PGlite instance: ./pglite-direct.ts), past
// Prisma's query runtime. Only for a statement hot enough for that runtime to show: the
// session-open read, which a reconnect storm runs thousands of times a second, cost more than
// twice the CPU through Prisma as straight on the same pool (bench/heartbeats.ts LOOP_COSTS=1);
// a new node's enrollment (../identity/enrollment/sql.ts) about twice on PGlite (bench/enroll.ts).
// Everything else goes through Prisma: one data path, typed by the schema.
//
// Rows come back as the driver parses them: timestamptz as Date, json and jsonb parsed, arrays
// as arrays, bool and int4 as JavaScript values. A statement here selects only columns of those
// types (int8 and timestamp without time zone parse differently in the two drivers, and the
// latter in the process's local time zone), which the callers' tests check on both backends.
import type pg from "pg";

export interface DirectStatement {
  /** The prepared statement's name on PostgreSQL: unique per text, and not Prisma's `mf_N` (./statement-names.ts). */
  readonly name: string;
  /** The SQL, with $1, $2, ... for `values`. */
  readonly text: string;
}

/** Runs one statement and returns its rows; a failure is reported to `failed` and rethrown unchanged. */
export type DirectQuery = <Row>(statement: DirectStatement, values: readonly unknown[]) => Promise<Row[]>;

export interface DirectOptions {
  /** Keep the statement prepared on each pooled connection (false behind a pooler that cannot carry prepared statements). */
  prepare: boolean;
  /** Hears of every statement that fails (the query error metrics), as the Prisma adapters' statements are heard. */
  failed?: ((err: unknown) => void) | undefined;
}

export function pgDirect(pool: pg.Pool, { prepare, failed }: DirectOptions): DirectQuery {
  return async <Row>(statement: DirectStatement, values: readonly unknown[]) => {
    const config = prepare
      ? { name: statement.name, text: statement.text, values: [...values] }
      : { text: statement.text, values: [...values] };
    try {
      return (await pool.query(config)).rows as Row[];
    } catch (err) {
      failed?.(err);
      throw err;
    }
  };
}
