// A direct statement (./direct.ts) on the embedded PGlite, kept prepared. PGlite's `query()` makes
// six calls into WebAssembly per statement (Parse, Describe, Bind, Describe, Execute, Sync) and
// parses and plans the text every time; here each statement is parsed once per instance under its
// name, and each call is one message (Bind, Describe, Execute, Sync) into WebAssembly. The new
// node's enrollment statement costs a fraction of what it did through `query()` (bench/enroll.ts
// on PGlite measures the enrollment it is part of). Prisma's repeated statements run the same way
// (./pglite-prepared.ts).
//
// Messages go in one buffer (one call into WebAssembly); results are read with PGlite's own
// parsers, so rows come back exactly as `query()` gives them.
import { type PGlite, type QueryOptions, type Results, parse, protocol } from "@electric-sql/pglite";
import type { DirectQuery, DirectStatement } from "./direct.js";
import type { QueryWatch } from "./query-watch.js";

const { serialize } = protocol;

interface Prepared {
  readonly text: string;
  /** The parameters' type OIDs, as PostgreSQL inferred them: they choose each value's serializer. */
  readonly parameterTypes: readonly number[];
}

/** What each PGlite instance (one PostgreSQL session) has prepared, whoever asked it to. */
const preparedOn = new WeakMap<PGlite, Map<string, Prepared>>();

/**
 * Runs `statement` on `db` prepared under its name (parsed once per instance, whoever asked), as
 * one message into WebAssembly; the result is what `query()` returns for the same text, values and
 * options. The caller holds PGlite's locks (outside a transaction both, inside one the query lock).
 */
export async function runPrepared(
  db: PGlite,
  statement: DirectStatement,
  values: readonly unknown[],
  options?: QueryOptions,
): Promise<Results> {
  const prepared = preparedOn.get(db) ?? new Map<string, Prepared>();
  preparedOn.set(db, prepared);
  let entry = prepared.get(statement.name);
  if (entry === undefined) {
    const { messages } = await db.execProtocol(
      Buffer.concat([
        serialize.parse({ name: statement.name, text: statement.text }),
        serialize.describe({ type: "S", name: statement.name }),
        serialize.sync(),
      ]),
    );
    entry = { text: statement.text, parameterTypes: parse.parseDescribeStatementResults(messages) };
    prepared.set(statement.name, entry);
  }
  if (entry.text !== statement.text) {
    throw new Error(`statement name ${statement.name} is already prepared with another text`);
  }
  const types = entry.parameterTypes;
  const serialized = values.map((value, i) => {
    if (value === null || value === undefined) return null;
    const serializer = options?.serializers?.[types[i] ?? 0] ?? db.serializers[types[i] ?? 0];
    return serializer ? serializer(value) : String(value);
  });
  // Sync in the same message: after an error PostgreSQL skips to it, so the session is idle again
  // whatever happened, and a statement outside a transaction commits at it.
  const { messages } = await db.execProtocol(
    Buffer.concat([
      serialize.bind({ statement: statement.name, values: serialized }),
      serialize.describe({ type: "P" }),
      serialize.execute({}),
      serialize.sync(),
    ]),
  );
  return parse.parseResults(messages, db.parsers, options)[0] ?? { rows: [], fields: [] };
}

/**
 * Runs `run` under both of PGlite's locks, as `query()` takes them: the transaction lock keeps the
 * statement out of a transaction another caller has open, the query lock out of any other statement.
 */
export async function outsideTransactions<T>(db: PGlite, run: () => Promise<T>): Promise<T> {
  await db._checkReady();
  return db._runExclusiveTransaction(() => db._runExclusiveQuery(run));
}

/**
 * PGlite is one session: a statement waits behind any transaction in progress, as `query()` does.
 * `prepare` false runs each statement through PGlite's own `query()` instead, past none of its
 * private methods (MODELFORGE_DATABASE_PREPARED_STATEMENTS=0: for a PGlite version this path was
 * not tested against).
 */
export function pgliteDirect(db: PGlite, { failed, before }: QueryWatch, prepare = true): DirectQuery {
  return async <Row>(statement: DirectStatement, values: readonly unknown[]) => {
    if (before !== undefined) await before();
    try {
      const result = prepare
        ? await outsideTransactions(db, () => runPrepared(db, statement, values))
        : await db.query(statement.text, [...values]);
      return result.rows as Row[];
    } catch (err) {
      failed?.(err);
      throw err;
    }
  };
}
