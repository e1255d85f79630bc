// What opening a session reads, in one round trip: the credential and its node (to authorize),
// the node's stream cursors (for Welcome) and whether it has any unfinished job (if not, and the
// agent runs none, the jobs reconciliation at open is skipped). A reconnect storm is thousands of
// these at once, so the opens waiting together are read by one statement, and nothing is written
// unless Hello changed.
//
// Why batched: in a storm the server's event loop is busy with TLS handshakes, and each loop
// iteration then takes tens to hundreds of milliseconds. A read per open made the opens finished
// per second proportional to (admitted opens) / (iteration length): after a restart of both
// replicas (bench/heartbeats.ts RESTARTS) no session was answered for the first seconds after
// ready while thousands sat with TLS up. One statement per batch makes it the number waiting.
import { Prisma, type Node } from "../../gen/prisma/client.js";
import { checkAuthorized, type NodeIdentity } from "../identity/node-auth.js";
import type { DirectQuery, DirectStatement } from "../db/direct.js";

export interface OpeningState {
  node: Node;
  /** Highest accepted sequence per stream. */
  cursors: Record<string, bigint>;
  /** Whether the node has a pending or leased job. */
  hasJobs: boolean;
}

interface Row extends Node {
  credentialSerial: string;
  credentialNodeId: string;
  revokedAt: Date | null;
  expiresAt: Date;
  cursors: Record<string, string> | null;
  hasJobs: boolean;
}

// Straight on the driver (../db/direct.ts): Prisma's runtime cost more than the query itself. The
// Node columns are named, not `n.*`: the statement is kept prepared, and PostgreSQL refuses to
// run a prepared `n.*` once a newer replica's migration has added a column to Node. Every column
// selected is of a type both drivers parse alike (no int8, no timestamp without time zone).
const openingRead: DirectStatement = {
  name: "mf_session_open_batch",
  text: `SELECT ${Object.values(Prisma.NodeScalarFieldEnum)
    .map((column) => `n."${column}"`)
    .join(", ")},
       c.serial AS "credentialSerial", c."nodeId" AS "credentialNodeId", c."revokedAt", c."expiresAt",
       (SELECT json_object_agg(s.stream, s.sequence::text) FROM "StreamCursor" AS s WHERE s."nodeId" = n.id) AS cursors,
       EXISTS (SELECT 1 FROM "Job" AS j WHERE j."nodeId" = n.id AND j.state IN ('pending', 'leased')) AS "hasJobs"
  FROM "NodeCredential" AS c
  JOIN "Node" AS n ON n.id = c."nodeId"
 WHERE c.serial = ANY($1::text[])`,
};

/** The rule over one credential's row (undefined: no such credential), as the session needs it. */
function openingStateOf(row: Row | undefined, identity: NodeIdentity, now: Date): OpeningState {
  const node = checkAuthorized(
    row === undefined ? null : { nodeId: row.credentialNodeId, revokedAt: row.revokedAt, expiresAt: row.expiresAt, node: row },
    identity,
    now,
  );
  const { credentialSerial: _s, credentialNodeId: _c, revokedAt: _r, expiresAt: _e, cursors, hasJobs, ...rest } = node;
  return {
    node: rest as Node,
    cursors: Object.fromEntries(Object.entries(cursors ?? {}).map(([k, v]) => [k, BigInt(v)])),
    hasJobs,
  };
}

export interface OpeningReadLimits {
  /** Credentials read by one statement at most. */
  batch: number;
  /** Statements in flight at once: the first opens of a quiet moment go alone, at once. */
  concurrent: number;
}

interface Waiter {
  identity: NodeIdentity;
  now: Date;
  resolve: (state: OpeningState) => void;
  reject: (err: unknown) => void;
}

/**
 * Reads each opening session's state, the opens waiting together in one statement. A failed
 * statement fails every open it carried, with the driver's error (a lost database is answered
 * unavailable, and the agents retry).
 */
export class OpeningReads {
  private waiting: Waiter[] = [];
  private running = 0;

  constructor(
    private readonly query: DirectQuery,
    private readonly limits: OpeningReadLimits = { batch: 500, concurrent: 2 },
  ) {}

  read(identity: NodeIdentity, now: Date): Promise<OpeningState> {
    return new Promise((resolve, reject) => {
      this.waiting.push({ identity, now, resolve, reject });
      this.pump();
    });
  }

  private pump(): void {
    while (this.running < this.limits.concurrent && this.waiting.length > 0) {
      const batch = this.waiting.splice(0, this.limits.batch);
      this.running++;
      void this.run(batch).finally(() => {
        this.running--;
        this.pump();
      });
    }
  }

  private async run(batch: Waiter[]): Promise<void> {
    let rows: Row[];
    try {
      rows = await this.query<Row>(openingRead, [[...new Set(batch.map((w) => w.identity.serial))]]);
    } catch (err) {
      for (const w of batch) w.reject(err);
      return;
    }
    const bySerial = new Map(rows.map((r) => [r.credentialSerial, r]));
    for (const w of batch) {
      try {
        w.resolve(openingStateOf(bySerial.get(w.identity.serial), w.identity, w.now));
      } catch (err) {
        w.reject(err);
      }
    }
  }
}
