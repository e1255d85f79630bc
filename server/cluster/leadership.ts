// One reconciler at a time: liveness reconciliation, lease expiry and reclaim run on the replica
// that holds a PostgreSQL session-level advisory lock, on a connection of its own. When the
// leader dies its connection ends and PostgreSQL releases the lock; another replica, trying every
// `retryMs`, takes it within about that long. The leader checks its connection as often, and steps
// down the moment it fails (the lock may be gone with it). Everything the leader runs is a
// conditional update, so a moment with two leaders (a partition the old one has not noticed yet)
// changes nothing twice. The embedded database belongs to one process: that one always leads.
import pg from "pg";
import type { Logger } from "../observability/logger.js";
import { parsePostgresUrl, redact } from "../db/postgres-url.js";
import type { OutageSink } from "../db/availability.js";

export interface Leadership {
  /** Whether this replica runs the reconcilers now. */
  isLeader(): boolean;
  close(): Promise<void>;
}

/** The advisory lock's key (two int4 halves of "modelforge reconcilers"). */
const lockKey = [0x6d66, 0x7263] as const;

/** How long the leadership connection may take to answer. */
const answerWithinMs = 10_000;

const always: Leadership = { isLeader: () => true, close: async () => undefined };

class PgLeadership implements Leadership {
  private client: pg.Client | undefined;
  private leader = false;
  private closed = false;
  private timer: NodeJS.Timeout | undefined;
  private readonly describe: string;
  private readonly secrets: string[];
  private readonly connectionString: string;

  constructor(
    url: string,
    private readonly replicaId: string,
    private readonly log: Logger,
    private readonly retryMs: number,
    /** A database outage is reported there once; stepping down because of it is said at info. */
    private readonly outage?: OutageSink,
  ) {
    const parsed = parsePostgresUrl(url);
    this.describe = parsed.describe;
    this.secrets = parsed.secrets;
    this.connectionString = parsed.connectionString;
  }

  isLeader(): boolean {
    return this.leader;
  }

  /** The first try is awaited, so a replica alone on its database leads from its first round. */
  async start(): Promise<void> {
    await this.round();
  }

  private async round(): Promise<void> {
    try {
      await this.attempt();
    } catch (err) {
      this.lose(err);
    }
    if (!this.closed) this.timer = setTimeout(() => void this.round(), this.retryMs);
  }

  /** Leader: is the connection (and so the lock) still there? Otherwise: try to take the lock. */
  private async attempt(): Promise<void> {
    if (this.client === undefined) {
      const client = new pg.Client({
        connectionString: this.connectionString,
        application_name: "modelforge-leadership",
        keepAlive: true,
        connectionTimeoutMillis: answerWithinMs,
        // A leader that cannot get an answer in time may have lost its lock: step down. (Not
        // sooner: a busy machine answers late, and a leader that steps down for nothing leaves
        // the reconcilers idle until it, or another, takes the lock again.)
        query_timeout: answerWithinMs,
      });
      client.on("error", (err) => this.lose(err));
      this.client = client;
      await client.connect();
      if (this.closed) return void (await client.end().catch(() => undefined));
    }
    const client = this.client;
    if (this.leader) {
      await client.query("SELECT 1");
      return;
    }
    const r = await client.query<{ locked: boolean }>("SELECT pg_try_advisory_lock($1, $2) AS locked", [...lockKey]);
    if (r.rows[0]?.locked === true && !this.closed) {
      this.leader = true;
      this.log.info({ replica: this.replicaId }, "leading the reconcilers");
    }
  }

  private lose(err: unknown): void {
    const client = this.client;
    this.client = undefined;
    client?.end().catch(() => undefined);
    if (this.leader && !this.closed)
      this.log[this.outage?.failed(err) ? "info" : "warn"](
        { replica: this.replicaId, db: this.describe, error: redact((err as Error).message, this.secrets) },
        "stepped down from leading the reconcilers",
      );
    this.leader = false;
  }

  async close(): Promise<void> {
    this.closed = true;
    clearTimeout(this.timer);
    this.leader = false;
    const client = this.client;
    this.client = undefined;
    // Ending the session releases the lock: another replica takes over on its next try.
    await client?.end().catch(() => undefined);
  }
}

export async function openLeadership(opts: {
  databaseUrl: string | undefined;
  replicaId: string;
  log: Logger;
  retryMs?: number;
  outage?: OutageSink;
}): Promise<Leadership> {
  if (opts.databaseUrl === undefined) return always;
  const leadership = new PgLeadership(opts.databaseUrl, opts.replicaId, opts.log, opts.retryMs ?? 1_000, opts.outage);
  await leadership.start();
  return leadership;
}
