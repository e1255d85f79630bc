// A new node's enrollment as one SQL statement: find and claim the token by its hash, create the
// node, record its credential and audit event. One statement is atomic on its own and the only
// round trip of an enrollment that succeeds (the interactive transaction took seven, and reading
// the token first one more); enrollment storms are when that matters. The conditional
// UPDATE is the claim: of any number of concurrent callers exactly one gets its row back, and
// nothing else is inserted for the others. Timestamps go as ISO strings with an explicit offset, so
// the session's time zone never matters; columns follow prisma/schema.prisma. It runs straight on
// the driver (../../db/direct.ts), kept prepared on both backends: through Prisma's runtime on the
// embedded PGlite it cost about twice the CPU of the statement run straight (bench/enroll.ts), and
// an enrollment storm is that statement thousands of times.
import type { DirectQuery, DirectStatement } from "../../db/direct.js";

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

const enrollNewNodeStatement: DirectStatement = {
  name: "mf_enroll_new_node",
  text: `
    WITH claimed AS (
      UPDATE "EnrollmentToken"
         SET "usedAt" = $1::timestamptz, "usedByNodeId" = $2::uuid
       WHERE "tokenHash" = $3::text AND "nodeId" IS NULL
         AND "usedAt" IS NULL AND "revokedAt" IS NULL AND "expiresAt" > $1::timestamptz
      RETURNING "id", "nodeName", "labels"
    ), node AS (
      INSERT INTO "Node" ("id", "name", "labels", "createdAt", "updatedAt", "livenessChangedAt", "agentVersion")
      SELECT $2::uuid, COALESCE(NULLIF($4::text, ''), NULLIF(claimed."nodeName", ''), $5::text),
             claimed."labels", $1::timestamptz, $1::timestamptz, $1::timestamptz, $6::text
        FROM claimed
      RETURNING "id"
    ), credential AS (
      INSERT INTO "NodeCredential" ("serial", "nodeId", "issuedAt", "expiresAt")
      SELECT $7::text, "id", $1::timestamptz, $8::timestamptz FROM node
      RETURNING "nodeId"
    ), audit AS (
      INSERT INTO "AuditEvent" ("id", "time", "actor", "action", "targetType", "targetId", "correlationId", "details")
      SELECT $9::uuid, $1::timestamptz, $10::text, 'node.enrolled', 'node', credential."nodeId"::text,
             $11::text, jsonb_build_object('enrollmentTokenId', claimed."id"::text, 'serial', $7::text)
        FROM credential, claimed
      RETURNING "id"
    )
    SELECT count(*)::int AS n FROM audit`,
};

/**
 * True when this caller claimed the token and the node now exists; false when nothing was claimed
 * (an unknown, used, revoked or expired token, one bound to a node, or a lost race): the caller
 * then reads the token to say which.
 */
export async function enrollNewNode(direct: DirectQuery, e: NewNodeEnrollment): Promise<boolean> {
  const now = e.now.toISOString();
  const rows = await direct<{ n: number }>(enrollNewNodeStatement, [
    now,
    e.nodeId,
    e.tokenHash,
    e.requestedName,
    `node-${e.nodeId.slice(0, 8)}`,
    e.agentVersion,
    e.serial,
    e.notAfter.toISOString(),
    e.audit.id,
    e.audit.actor,
    e.audit.correlationId,
  ]);
  return rows[0]?.n === 1;
}
