// The two hottest job writes as single SQL statements: creating a job (with its first lease and its
// audit event) and completing one (with its attempt). One statement is atomic on its own, so
// neither needs an interactive transaction: on PostgreSQL that is one round trip instead of five
// or six, on PGlite a fraction of the work. Everything else goes through the Prisma client.
//
// Timestamps are passed as ISO strings with an explicit UTC offset, so the session's time zone
// never matters; the column lists follow prisma/schema.prisma (the schema test keeps the
// migrations and the schema in step).
import type { Prisma } from "../../gen/prisma/client.js";

type Db = Pick<Prisma.TransactionClient, "$queryRaw">;

export interface NewJob {
  id: string;
  nodeId: string;
  capability: string;
  /** jobs.v1.JobSpec as protobuf JSON. */
  spec: unknown;
  orderingKey: string | null;
  maxAttempts: number;
  /** Set when the job is leased in the same step (attempt 1 until this instant). */
  leaseExpiresAt: Date | null;
  now: Date;
  audit: { id: string; actor: string; actorName: string | undefined; correlationId: string | undefined; details: Record<string, string> };
}

/** Inserts the job, its first attempt when leased, and its `job.created` audit event; returns its seq. */
export async function insertJob(db: Db, job: NewJob): Promise<bigint> {
  const now = job.now.toISOString();
  const leased = job.leaseExpiresAt !== null;
  const expires = job.leaseExpiresAt?.toISOString() ?? null;
  const rows = await db.$queryRaw<{ seq: bigint }[]>`
    WITH job AS (
      INSERT INTO "Job" ("id", "nodeId", "capability", "spec", "state", "orderingKey", "attempt", "maxAttempts",
                         "leaseExpiresAt", "createdAt", "updatedAt")
      VALUES (${job.id}::uuid, ${job.nodeId}::uuid, ${job.capability}, ${JSON.stringify(job.spec)}::jsonb,
              ${leased ? "leased" : "pending"}, ${job.orderingKey}::text, ${leased ? 1 : 0}::int, ${job.maxAttempts}::int,
              ${expires}::timestamptz, ${now}::timestamptz, ${now}::timestamptz)
      RETURNING "id", "seq"
    ), attempt AS (
      INSERT INTO "JobAttempt" ("jobId", "attempt", "leasedAt", "expiresAt")
      SELECT "id", 1, ${now}::timestamptz, ${expires}::timestamptz FROM job WHERE ${leased}::boolean
    ), audit AS (
      INSERT INTO "AuditEvent" ("id", "time", "actor", "actorName", "action", "targetType", "targetId", "correlationId", "details")
      SELECT ${job.audit.id}::uuid, ${now}::timestamptz, ${job.audit.actor}, ${job.audit.actorName ?? null}::text, 'job.created', 'job', "id"::text,
             ${job.audit.correlationId ?? null}::text, ${JSON.stringify(job.audit.details)}::jsonb
        FROM job
    )
    SELECT "seq" FROM job`;
  const seq = rows[0]?.seq;
  if (seq === undefined) throw new Error("job insert returned no row");
  return BigInt(seq);
}

/**
 * Marks a job succeeded with its result, if `attempt` still holds a live lease at `now`, and ends
 * that attempt. False when the lease was lost meanwhile (nothing is written then).
 */
export async function completeLeased(db: Db, jobId: string, attempt: number, result: unknown, now: Date): Promise<boolean> {
  const at = now.toISOString();
  const rows = await db.$queryRaw<{ n: number }[]>`
    WITH done AS (
      UPDATE "Job"
         SET "state" = 'succeeded', "result" = ${JSON.stringify(result)}::jsonb, "failure" = NULL,
             "leaseExpiresAt" = NULL, "finishedAt" = ${at}::timestamptz, "updatedAt" = ${at}::timestamptz
       WHERE "id" = ${jobId}::uuid AND "state" = 'leased' AND "attempt" = ${attempt}::int
         AND "leaseExpiresAt" > ${at}::timestamptz
      RETURNING "id"
    ), ended AS (
      UPDATE "JobAttempt" SET "endedAt" = ${at}::timestamptz, "outcome" = 'succeeded'
       WHERE "jobId" IN (SELECT "id" FROM done) AND "attempt" = ${attempt}::int AND "endedAt" IS NULL
    )
    SELECT count(*)::int AS n FROM done`;
  return Number(rows[0]?.n ?? 0) === 1;
}

/**
 * Closes an attempt's row (once: an ended attempt keeps its first outcome), with the agent's
 * failure when its report ended it (a repeated report is compared against it).
 */
export async function endAttempt(
  tx: Pick<Prisma.TransactionClient, "jobAttempt">,
  jobId: string,
  attempt: number,
  outcome: string,
  now: number,
  failure?: Prisma.InputJsonValue,
): Promise<void> {
  await tx.jobAttempt.updateMany({
    where: { jobId, attempt, endedAt: null },
    data: { endedAt: new Date(now), outcome, ...(failure !== undefined ? { failure } : {}) },
  });
}
