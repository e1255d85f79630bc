// A new node's enrollment as one SQL statement: find and claim the token by its hash, create the
// node, record its credential and audit event. One statement is atomic on its own and the only
// round trip of an enrollment that succeeds (the interactive transaction took seven, and reading
// the token first one more); enrollment storms are when that matters. The conditional
// UPDATE is the claim: of any number of concurrent callers exactly one gets its row back, and
// nothing else is inserted for the others. Timestamps go as ISO strings with an explicit offset, so
// the session's time zone never matters; columns follow prisma/schema.prisma.
import type { Prisma } from "../../../gen/prisma/client.js";

type Db = Pick<Prisma.TransactionClient, "$queryRaw">;

export interface NewNodeEnrollment {
  /** The presented token, by its hash: only an active token bound to no node is claimed. */
  tokenHash: string;
  nodeId: string;
  /** The name the agent asked for; empty: the token's, else node-<first 8 of the id>. */
  requestedName: string;
  agentVersion: string | null;
  serial: string;
  notAfter: Date;
  now: Date;
  audit: { id: string; actor: string; correlationId: string };
}

/**
 * True when this caller claimed the token and the node now exists; false when nothing was claimed
 * (an unknown, used, revoked or expired token, one bound to a node, or a lost race): the caller
 * then reads the token to say which.
 */
export async function enrollNewNode(db: Db, e: NewNodeEnrollment): Promise<boolean> {
  const now = e.now.toISOString();
  const rows = await db.$queryRaw<{ n: number }[]>`
    WITH claimed AS (
      UPDATE "EnrollmentToken"
         SET "usedAt" = ${now}::timestamptz, "usedByNodeId" = ${e.nodeId}::uuid
       WHERE "tokenHash" = ${e.tokenHash} AND "nodeId" IS NULL
         AND "usedAt" IS NULL AND "revokedAt" IS NULL AND "expiresAt" > ${now}::timestamptz
      RETURNING "id", "nodeName", "labels"
    ), node AS (
      INSERT INTO "Node" ("id", "name", "labels", "createdAt", "updatedAt", "livenessChangedAt", "agentVersion")
      SELECT ${e.nodeId}::uuid, COALESCE(NULLIF(${e.requestedName}, ''), NULLIF(claimed."nodeName", ''), ${`node-${e.nodeId.slice(0, 8)}`}),
             claimed."labels", ${now}::timestamptz, ${now}::timestamptz, ${now}::timestamptz, ${e.agentVersion}::text
        FROM claimed
      RETURNING "id"
    ), credential AS (
      INSERT INTO "NodeCredential" ("serial", "nodeId", "issuedAt", "expiresAt")
      SELECT ${e.serial}, "id", ${now}::timestamptz, ${e.notAfter.toISOString()}::timestamptz FROM node
      RETURNING "nodeId"
    ), audit AS (
      INSERT INTO "AuditEvent" ("id", "time", "actor", "action", "targetType", "targetId", "correlationId", "details")
      SELECT ${e.audit.id}::uuid, ${now}::timestamptz, ${e.audit.actor}, 'node.enrolled', 'node', credential."nodeId"::text,
             ${e.audit.correlationId}::text, jsonb_build_object('enrollmentTokenId', claimed."id"::text, 'serial', ${e.serial}::text)
        FROM credential, claimed
      RETURNING "id"
    )
    SELECT count(*)::int AS n FROM audit`;
  return rows[0]?.n === 1;
}
