// A new node's enrollment as one SQL statement: claim the token, create the node, record its
// credential and audit event. One statement is atomic on its own and a single round trip, where the
// interactive transaction took seven; enrollment storms are when that matters. The conditional
// UPDATE is the claim: of any number of concurrent callers exactly one gets its row back, and
// nothing else is inserted for the others. Timestamps go as ISO strings with an explicit offset, so
// the session's time zone never matters; columns follow prisma/schema.prisma.
import type { Prisma } from "../../../gen/prisma/client.js";

type Db = Pick<Prisma.TransactionClient, "$queryRaw">;

export interface NewNodeEnrollment {
  tokenId: string;
  nodeId: string;
  name: string;
  labels: unknown;
  agentVersion: string | null;
  serial: string;
  notAfter: Date;
  now: Date;
  audit: { id: string; actor: string; correlationId: string; details: Record<string, string> };
}

/** True when this caller claimed the token and the node now exists; false when the claim was lost. */
export async function enrollNewNode(db: Db, e: NewNodeEnrollment): Promise<boolean> {
  const now = e.now.toISOString();
  const rows = await db.$queryRaw<{ n: number }[]>`
    WITH claimed AS (
      UPDATE "EnrollmentToken"
         SET "usedAt" = ${now}::timestamptz, "usedByNodeId" = ${e.nodeId}::uuid
       WHERE "id" = ${e.tokenId}::uuid AND "usedAt" IS NULL AND "revokedAt" IS NULL AND "expiresAt" > ${now}::timestamptz
      RETURNING "id"
    ), node AS (
      INSERT INTO "Node" ("id", "name", "labels", "createdAt", "updatedAt", "livenessChangedAt", "agentVersion")
      SELECT ${e.nodeId}::uuid, ${e.name}, ${JSON.stringify(e.labels ?? {})}::jsonb, ${now}::timestamptz,
             ${now}::timestamptz, ${now}::timestamptz, ${e.agentVersion}::text
        FROM claimed
      RETURNING "id"
    ), credential AS (
      INSERT INTO "NodeCredential" ("serial", "nodeId", "issuedAt", "expiresAt")
      SELECT ${e.serial}, "id", ${now}::timestamptz, ${e.notAfter.toISOString()}::timestamptz FROM node
      RETURNING "nodeId"
    ), audit AS (
      INSERT INTO "AuditEvent" ("id", "time", "actor", "action", "targetType", "targetId", "correlationId", "details")
      SELECT ${e.audit.id}::uuid, ${now}::timestamptz, ${e.audit.actor}, 'node.enrolled', 'node', "nodeId"::text,
             ${e.audit.correlationId}::text, ${JSON.stringify(e.audit.details)}::jsonb
        FROM credential
      RETURNING "id"
    )
    SELECT count(*)::int AS n FROM audit`;
  return rows[0]?.n === 1;
}
