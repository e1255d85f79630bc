// The liveness reconciler's write as one SQL statement: move a batch of nodes from one stored
// liveness to the next (compare-and-set: a node another replica moved first is left alone) and
// audit each node moved. One statement is atomic on its own, so it needs no interactive
// transaction, which under a reconnect storm could wait for a pool connection longer than
// Prisma's transaction start timeout.
import type { Prisma } from "../../gen/prisma/client.js";

type Db = Pick<Prisma.TransactionClient, "$queryRaw">;

export interface LivenessMove {
  ids: string[];
  from: string;
  to: string;
  at: Date;
  /** The audit action, when this transition is audited. */
  action: string | undefined;
  actor: string;
}

/** Returns the ids that moved. */
export async function moveLiveness(db: Db, move: LivenessMove): Promise<string[]> {
  const at = move.at.toISOString();
  const details = JSON.stringify({ from: move.from, to: move.to });
  const rows = await db.$queryRaw<{ id: string }[]>`
    WITH moved AS (
      UPDATE "Node"
         SET "liveness" = ${move.to}, "livenessChangedAt" = ${at}::timestamptz, "updatedAt" = ${at}::timestamptz
       WHERE "id" = ANY(${move.ids}::uuid[]) AND "liveness" = ${move.from}
      RETURNING "id"
    ), audit AS (
      INSERT INTO "AuditEvent" ("id", "time", "actor", "action", "targetType", "targetId", "details")
      SELECT gen_random_uuid(), ${at}::timestamptz, ${move.actor}, ${move.action ?? ""}, 'node', "id"::text, ${details}::jsonb
        FROM moved WHERE ${move.action !== undefined}::boolean
    )
    SELECT "id"::text AS "id" FROM moved`;
  return rows.map((r) => r.id);
}
