// What opening a session reads, in one round trip: the credential and its node (to authorize),
// the node's stream cursors (for Welcome) and whether it has any unfinished job (if not, and the
// agent runs none, the jobs reconciliation at open is skipped). A reconnect storm is thousands of
// these at once, so each is one statement, and nothing is written unless Hello changed.
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
  name: "mf_session_open",
  text: `SELECT ${Object.values(Prisma.NodeScalarFieldEnum)
    .map((column) => `n."${column}"`)
    .join(", ")},
       c."nodeId" AS "credentialNodeId", c."revokedAt", c."expiresAt",
       (SELECT json_object_agg(s.stream, s.sequence::text) FROM "StreamCursor" AS s WHERE s."nodeId" = n.id) AS cursors,
       EXISTS (SELECT 1 FROM "Job" AS j WHERE j."nodeId" = n.id AND j.state IN ('pending', 'leased')) AS "hasJobs"
  FROM "NodeCredential" AS c
  JOIN "Node" AS n ON n.id = c."nodeId"
 WHERE c.serial = $1`,
};

export async function loadOpeningState(query: DirectQuery, identity: NodeIdentity, now: Date): Promise<OpeningState> {
  const row = (await query<Row>(openingRead, [identity.serial]))[0];
  const node = checkAuthorized(
    row === undefined ? null : { nodeId: row.credentialNodeId, revokedAt: row.revokedAt, expiresAt: row.expiresAt, node: row },
    identity,
    now,
  );
  const { credentialNodeId: _c, revokedAt: _r, expiresAt: _e, cursors, hasJobs, ...rest } = node;
  return {
    node: rest as Node,
    cursors: Object.fromEntries(Object.entries(cursors ?? {}).map(([k, v]) => [k, BigInt(v)])),
    hasJobs,
  };
}
