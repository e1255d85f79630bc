// Which statements PostgreSQL keeps prepared on each pooled connection. Prisma sends every
// statement unnamed, so PostgreSQL parses and plans it again on each call: for the session-open
// query the planning cost more than the execution (EXPLAIN ANALYZE; bench/heartbeats.ts
// LOOP_COSTS=1 times the query), paid thousands of times in a reconnect storm. A named statement
// is parsed once per connection and its plan can be reused.
//
// Not every statement is worth a name: Prisma writes a new text for each batch size or list
// length, and a named statement stays on every pooled connection (and in node-postgres' map)
// until the connection closes. So a text is named on its `after`-th sighting, and at most `limit`
// texts ever are; the texts seen once are forgotten in bulk when there are too many to track.
// A limit of 0 names nothing (a pooler that cannot carry prepared statements, e.g. PgBouncer in
// transaction mode before 1.21).

export interface StatementNamePolicy {
  /** The most texts ever named (0: none). */
  limit: number;
  /** Named on this sighting (2: from the second call on). */
  after?: number;
  /** How many texts seen too few times are tracked before they are forgotten. */
  track?: number;
}

/**
 * A `statementNameGenerator` for @prisma/adapter-pg: one stable name per hot text, else "" (which
 * node-postgres sends as an unnamed statement, as without a generator).
 */
export function statementNames({ limit, after = 2, track = 1_000 }: StatementNamePolicy): (query: { sql: string }) => string {
  const named = new Map<string, string>();
  const seen = new Map<string, number>();
  return ({ sql }) => {
    const name = named.get(sql);
    if (name !== undefined) return name;
    if (named.size >= limit) return "";
    const count = (seen.get(sql) ?? 0) + 1;
    if (count < after) {
      if (seen.size >= track) seen.clear();
      seen.set(sql, count);
      return "";
    }
    seen.delete(sql);
    const next = `mf_${named.size + 1}`;
    named.set(sql, next);
    if (named.size >= limit) seen.clear(); // nothing more will be named
    return next;
  };
}
