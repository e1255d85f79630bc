// Service clients' usage: requests, prompt (and of them cached) and completion tokens and time to first token, per
// service key, deployment, minute and outcome. Counted in memory on the request path and added to
// the database every few seconds in one statement, so accounting costs a row per key, deployment
// and minute, never a write per request (the contention LiteLLM's spend logs cause). A flush that
// fails (the database is away) keeps its counts for the next one, added to what was counted
// meanwhile; a process killed between flushes loses at most one flush interval of counts.
//
// The same statement moves each key's last use (ServiceKey.lastUsedAt) up to the latest minute it
// wrote. Kept as a column rather than derived at read time as max(minute) over UsageMinute: its
// primary key leads with the key but then the deployment, so that max reads every row a key ever
// wrote, and a list of keys would cost that per key; the column costs one row a key a minute, in a
// write the flush makes anyway, and outlives usage rows being pruned. PostgreSQL finds each key by
// ServiceKey's primary key (an index scan, seen with EXPLAIN), and with no index on lastUsedAt the
// update can stay HOT.
import { Prisma } from "../../gen/prisma/client.js";

/** One finished request, as the relay saw it. */
export interface UsageEntry {
  keyId: string;
  deploymentId: string;
  /** "ok" or the Connect code name it ended with. */
  outcome: string;
  promptTokens: number;
  /** Of the prompt tokens, those the runtime reused from its cache. */
  cachedPromptTokens: number;
  completionTokens: number;
  /** A stream's time to its first token, in milliseconds. */
  firstTokenMs?: number;
}

export interface UsageCell {
  requests: number;
  promptTokens: number;
  cachedPromptTokens: number;
  completionTokens: number;
  firstTokenMsSum: number;
  firstTokenCount: number;
}

/** Cells by key, deployment, minute (epoch ms) and outcome, joined by NUL: none of them can hold one. */
type Cells = Map<string, UsageCell>;

const minuteMs = 60_000;
/** Cells per INSERT: 10 parameters a row, well under PostgreSQL's 65,535 a statement. */
const rowsPerStatement = 1000;
const sep = "\u0000";

/** Pure: the cells with one entry added, at `at` (epoch ms). */
export function addEntry(cells: Cells, entry: UsageEntry, at: number): void {
  const minute = Math.floor(at / minuteMs) * minuteMs;
  const key = [entry.keyId, entry.deploymentId, minute, entry.outcome].join(sep);
  const cell = cells.get(key) ?? {
    requests: 0,
    promptTokens: 0,
    cachedPromptTokens: 0,
    completionTokens: 0,
    firstTokenMsSum: 0,
    firstTokenCount: 0,
  };
  cells.set(key, cell);
  cell.requests += 1;
  cell.promptTokens += entry.promptTokens;
  cell.cachedPromptTokens += entry.cachedPromptTokens;
  cell.completionTokens += entry.completionTokens;
  if (entry.firstTokenMs !== undefined) {
    cell.firstTokenMsSum += Math.max(0, Math.round(entry.firstTokenMs));
    cell.firstTokenCount += 1;
  }
}

/** Pure: `from` added into `into`. */
export function mergeCells(into: Cells, from: Cells): void {
  for (const [key, c] of from) {
    const cell = into.get(key);
    if (cell === undefined) into.set(key, { ...c });
    else {
      cell.requests += c.requests;
      cell.promptTokens += c.promptTokens;
      cell.cachedPromptTokens += c.cachedPromptTokens;
      cell.completionTokens += c.completionTokens;
      cell.firstTokenMsSum += c.firstTokenMsSum;
      cell.firstTokenCount += c.firstTokenCount;
    }
  }
}

export interface UsageWriter {
  $executeRaw(query: Prisma.Sql): Promise<number>;
}

export class UsageLedger {
  private cells: Cells = new Map();

  constructor(private readonly now: () => number) {}

  record(entry: UsageEntry): void {
    addEntry(this.cells, entry, this.now());
  }

  /** Cells counted and not yet written. */
  get pending(): number {
    return this.cells.size;
  }

  /** Adds what was counted to the database, a statement per `rowsPerStatement` cells; what fails is kept for the next flush. */
  async flush(db: UsageWriter): Promise<void> {
    const unwritten = this.cells;
    if (unwritten.size === 0) return;
    this.cells = new Map();
    try {
      while (unwritten.size > 0) {
        const batch = new Map([...unwritten].slice(0, rowsPerStatement));
        await db.$executeRaw(upsert(batch));
        for (const key of batch.keys()) unwritten.delete(key);
      }
    } catch (err) {
      mergeCells(unwritten, this.cells);
      this.cells = unwritten;
      throw err;
    }
  }
}

function upsert(cells: Cells): Prisma.Sql {
  const rows = [...cells].map(([key, c]) => {
    const [keyId, deploymentId, minute, outcome] = key.split(sep) as [string, string, string, string];
    return Prisma.sql`(${keyId}::uuid, ${deploymentId}::uuid, ${new Date(Number(minute))}::timestamptz, ${outcome}, ${c.requests}::bigint, ${c.promptTokens}::bigint, ${c.cachedPromptTokens}::bigint, ${c.completionTokens}::bigint, ${c.firstTokenMsSum}::bigint, ${c.firstTokenCount}::bigint)`;
  });
  // One statement, so the counts and the last use land together or not at all. A key's last use
  // only moves forward: a replica flushing an older minute late leaves a newer one alone.
  return Prisma.sql`
    WITH written AS (
      INSERT INTO "UsageMinute" ("keyId", "deploymentId", "minute", "outcome", "requests", "promptTokens", "cachedPromptTokens", "completionTokens", "firstTokenMsSum", "firstTokenCount")
      VALUES ${Prisma.join(rows)}
      ON CONFLICT ("keyId", "deploymentId", "minute", "outcome") DO UPDATE SET
        "requests" = "UsageMinute"."requests" + EXCLUDED."requests",
        "promptTokens" = "UsageMinute"."promptTokens" + EXCLUDED."promptTokens",
        "cachedPromptTokens" = "UsageMinute"."cachedPromptTokens" + EXCLUDED."cachedPromptTokens",
        "completionTokens" = "UsageMinute"."completionTokens" + EXCLUDED."completionTokens",
        "firstTokenMsSum" = "UsageMinute"."firstTokenMsSum" + EXCLUDED."firstTokenMsSum",
        "firstTokenCount" = "UsageMinute"."firstTokenCount" + EXCLUDED."firstTokenCount"
      RETURNING "keyId", "minute"
    ), latest AS (
      SELECT "keyId", max("minute") AS "minute" FROM written GROUP BY "keyId"
    )
    UPDATE "ServiceKey" k SET "lastUsedAt" = latest."minute"
    FROM latest
    WHERE k."id" = latest."keyId" AND (k."lastUsedAt" IS NULL OR k."lastUsedAt" < latest."minute")`;
}
