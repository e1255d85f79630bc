// What opening a session reads, in one round trip: the credential and its node (to authorize),
// the node's stream cursors (for Welcome) and whether it has any unfinished job (if not, and the
// agent runs none, the jobs reconciliation at open is skipped). A reconnect storm is thousands of
// these at once, so each is one statement, and nothing is written unless Hello changed.
import { Prisma, type Node, type PrismaClient } from "../../gen/prisma/client.js";
import { checkAuthorized, type NodeIdentity } from "../identity/node-auth.js";

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

// Named, not `n.*`: the statement is kept prepared (server/db/statement-names.ts), and PostgreSQL
// refuses to run a prepared `n.*` once a newer replica's migration has added a column to Node.
const nodeColumns = Prisma.raw(
  Object.values(Prisma.NodeScalarFieldEnum)
    .map((column) => `n."${column}"`)
    .join(", "),
);

export async function loadOpeningState(prisma: PrismaClient, identity: NodeIdentity, now: Date): Promise<OpeningState> {
  const rows = await prisma.$queryRaw<Row[]>`
    SELECT ${nodeColumns},
           c."nodeId" AS "credentialNodeId", c."revokedAt", c."expiresAt",
           (SELECT json_object_agg(s.stream, s.sequence::text) FROM "StreamCursor" AS s WHERE s."nodeId" = n.id) AS cursors,
           EXISTS (SELECT 1 FROM "Job" AS j WHERE j."nodeId" = n.id AND j.state IN ('pending', 'leased')) AS "hasJobs"
      FROM "NodeCredential" AS c
      JOIN "Node" AS n ON n.id = c."nodeId"
     WHERE c.serial = ${identity.serial}`;
  const row = rows[0];
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
