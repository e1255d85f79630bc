// Heartbeats are held in memory and persisted in batches, as Kubernetes node leases are: a
// heartbeat per database write cannot keep up with a fleet. Liveness always reads the newer of the
// in-memory and persisted times, so a node never looks alive longer than it is; a replica that dies
// with unflushed heartbeats only makes its nodes look *less* alive until they next report. Each
// node's time is written at most every `persistEveryMs`: other replicas and the reconcilers' queries
// see it that much late, which again errs towards less alive.
import type { DirectQuery, DirectStatement } from "../db/direct.js";

// Straight on the driver (../db/direct.ts), kept prepared: through Prisma's runtime a flush cost
// the server about twice the CPU (bench/sweeps.ts), every second on every replica.

/** Rows another transaction holds locked are skipped: the flush never waits on a lock. */
const releaseStatement: DirectStatement = {
  name: "mf_heartbeat_release",
  text: `UPDATE "Node" SET "sessionReplica" = NULL
 WHERE id IN (SELECT id FROM "Node" WHERE id = ANY($1::uuid[]) AND "sessionReplica" = $2 FOR UPDATE SKIP LOCKED)`,
};

/** GREATEST: another replica may have written a newer time for the same node meanwhile. */
const flushStatement: DirectStatement = {
  name: "mf_heartbeat_flush",
  text: `WITH v AS (SELECT * FROM unnest($1::uuid[], $2::timestamptz[], $3::text[]) AS v(id, t, r)),
     free AS (SELECT n.id FROM "Node" AS n JOIN v ON v.id = n.id FOR UPDATE OF n SKIP LOCKED)
UPDATE "Node" AS n
   SET "lastHeartbeatAt" = GREATEST(COALESCE(n."lastHeartbeatAt", v.t), v.t),
       "sessionReplica" = CASE WHEN v.t >= COALESCE(n."lastHeartbeatAt", v.t) THEN v.r ELSE n."sessionReplica" END
  FROM v
 WHERE n.id = v.id AND n.id IN (SELECT id FROM free)
RETURNING n.id::text AS id`,
};

export class HeartbeatBook {
  private readonly latest = new Map<string, number>();
  private readonly persisted = new Map<string, number>();
  private unflushed = new Map<string, number>();
  /** Nodes whose session here ended: the next flush clears this replica's name from them. */
  private released = new Set<string>();

  constructor(private readonly persistEveryMs: number) {}

  /** Records a heartbeat at the server's receive time. */
  record(nodeId: string, receivedAt: number): void {
    this.latest.set(nodeId, receivedAt);
    const written = this.persisted.get(nodeId);
    if (written === undefined || receivedAt - written >= this.persistEveryMs) this.unflushed.set(nodeId, receivedAt);
  }

  /** The node's session here ended (not at shutdown): other replicas stop naming this one. */
  release(nodeId: string): void {
    this.released.add(nodeId);
  }

  /** The newest heartbeat time known here and in the database row. */
  lastHeartbeatAt(nodeId: string, persisted: Date | null): number | null {
    const mem = this.latest.get(nodeId);
    const db = persisted?.getTime();
    if (mem === undefined) return db ?? null;
    return db === undefined ? mem : Math.max(mem, db);
  }

  /**
   * Writes every heartbeat received since the last flush in one statement. Rows another
   * transaction holds locked (a reconciler moving liveness, a Hello) are skipped and kept for the
   * next flush: the flush never waits on a lock, so it can never be part of a deadlock.
   * `holderOf` names the replica holding the node's session (null: none here).
   */
  async flush(direct: DirectQuery, holderOf: (nodeId: string) => string | null = () => null, replicaId?: string): Promise<number> {
    if (this.released.size > 0 && replicaId !== undefined) {
      // Only rows still naming this replica, and not a node that came back here meanwhile.
      const gone = [...this.released].filter((id) => holderOf(id) === null);
      this.released = new Set();
      // Locked rows are skipped, as below; they stay named until the node goes stale.
      if (gone.length > 0) await direct(releaseStatement, [gone, replicaId]);
    }
    if (this.unflushed.size === 0) return 0;
    const batch = this.unflushed;
    this.unflushed = new Map();
    const ids = [...batch.keys()];
    const times = ids.map((id) => new Date(batch.get(id)!));
    // Which replica holds each session rides on the same write: no extra statement for it.
    const holders = ids.map(holderOf);
    let written: { id: string }[];
    try {
      written = await direct<{ id: string }>(flushStatement, [ids, times, holders]);
    } catch (err) {
      this.keep(batch);
      throw err;
    }
    for (const { id } of written) {
      this.persisted.set(id, batch.get(id)!);
      batch.delete(id);
    }
    // What is left was locked by another transaction.
    this.keep(batch);
    return written.length;
  }

  /** Puts heartbeats back for the next flush, unless newer ones arrived meanwhile. */
  private keep(batch: Map<string, number>): void {
    for (const [id, t] of batch) if (!this.unflushed.has(id)) this.unflushed.set(id, t);
  }
}
