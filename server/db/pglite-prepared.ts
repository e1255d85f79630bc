// Prisma's statements on the embedded PGlite, kept prepared once their text repeats, as they are on
// PostgreSQL (./statement-names.ts). PGlite's `query()` parses and plans every text again, in this
// thread: on a fleet at rest the periodic loops' dozen reads a second took 1 to 6 ms each, and a
// request that arrived meanwhile waited for the one running. Prepared, a statement is one message
// into WebAssembly (./pglite-direct.ts runPrepared) and skips the parse.
//
// pglite-prisma-adapter runs every statement as `query(sql, values, options)` on the instance or on
// a transaction's object; the instance handed to it is wrapped so both go through here. A text
// without a name (seen once, or past the limit) and a call with options this path does not carry
// (parameter types given, a blob) take `query()` as before.
import type { PGlite, QueryOptions, Results, Transaction } from "@electric-sql/pglite";
import { outsideTransactions, runPrepared } from "./pglite-direct.js";

type NameOf = (query: { sql: string }) => string;

const simple = (options: QueryOptions | undefined) => options?.paramTypes === undefined && options?.blob === undefined;

/** `db` for Prisma's adapter, its statements (in transactions too) prepared under `nameOf`'s names. */
export function preparedPglite(db: PGlite, nameOf: NameOf): PGlite {
  const query = async (sql: string, params: unknown[] = [], options?: QueryOptions): Promise<Results> => {
    const name = simple(options) ? nameOf({ sql }) : "";
    if (name === "") return db.query(sql, params, options);
    return outsideTransactions(db, () => runPrepared(db, { name, text: sql }, params, options));
  };
  const transaction = <T>(callback: (tx: Transaction) => Promise<T>): Promise<T> =>
    db.transaction((tx) => callback(preparedTransaction(db, tx, nameOf)));
  return new Proxy(db, {
    get(target, prop) {
      if (prop === "query") return query;
      if (prop === "transaction") return transaction;
      const value = Reflect.get(target, prop, target) as unknown;
      // PGlite's methods reach private fields: they run on the instance, not on this proxy.
      return typeof value === "function" ? value.bind(target) : value;
    },
  });
}

/** A transaction's object whose statements are prepared too; it holds the transaction lock already. */
function preparedTransaction(db: PGlite, tx: Transaction, nameOf: NameOf): Transaction {
  const query = async (sql: string, params: unknown[] = [], options?: QueryOptions): Promise<Results> => {
    const name = simple(options) ? nameOf({ sql }) : "";
    if (name === "") return tx.query(sql, params, options);
    if (tx.closed) throw new Error("Transaction is closed");
    return db._runExclusiveQuery(() => runPrepared(db, { name, text: sql }, params, options));
  };
  return new Proxy(tx, {
    get(target, prop) {
      return prop === "query" ? query : Reflect.get(target, prop, target);
    },
  });
}
