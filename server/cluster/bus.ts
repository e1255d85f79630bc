// Replicas tell each other what needs a node's session, wherever it is: new work for a node, a
// cancellation, a credential revoked, a node disabled or decommissioned, a user deactivated. On PostgreSQL this is
// LISTEN/NOTIFY on one channel (a dedicated connection listens, reconnecting after a loss); on the
// embedded database, which one process owns, it is in-process. Delivery is best effort: the
// periodic sweeps (leasing, revoked sessions) stay the safety net for a notification lost while a
// listener reconnects. Every event is idempotent on its receiver.
import { randomUUID } from "node:crypto";
import pg from "pg";
import type { PrismaClient } from "../../gen/prisma/client.js";
import type { Logger } from "../observability/logger.js";
import { parsePostgresUrl, redact } from "../db/postgres-url.js";
import type { OutageSink } from "../db/availability.js";

export type ClusterEvent =
  /** The node may have leasable work: the replica holding its session runs a leasing pass. */
  | { kind: "work"; nodeId: string }
  /** Tell the node to stop an attempt. */
  | { kind: "cancel"; nodeId: string; jobId: string; attempt: number; reason: string; leaseLost: boolean }
  /** End the node's session (disabled, decommissioned). */
  | { kind: "close-node"; nodeId: string; code: number; message: string }
  /** End the sessions of these credentials (revoked). */
  | { kind: "close-serials"; serials: string[]; code: number; message: string }
  /** A deployment's routing changed (drain, revision, unload): drop what the invoke relay cached. */
  | { kind: "deployment"; deploymentId: string }
  /** An admin deactivated a user: end their operator calls still open here. */
  | { kind: "user-deactivated"; userId: string };

export interface ClusterBus {
  /** This replica's id: random per process, so a restarted replica is a new one. */
  readonly replicaId: string;
  /** Sends to every other replica; never throws (a failure is logged; the sweeps catch up). */
  publish(event: ClusterEvent): void;
  /** Events from other replicas. */
  onEvent(handler: (event: ClusterEvent) => void): void;
  close(): Promise<void>;
}

const channel = "modelforge_cluster";
/** NOTIFY payloads are limited to 8000 bytes: long serial lists go in several. */
const serialsPerMessage = 100;

function split(event: ClusterEvent): ClusterEvent[] {
  if (event.kind !== "close-serials" || event.serials.length <= serialsPerMessage) return [event];
  const out: ClusterEvent[] = [];
  for (let i = 0; i < event.serials.length; i += serialsPerMessage)
    out.push({ ...event, serials: event.serials.slice(i, i + serialsPerMessage) });
  return out;
}

abstract class BaseBus implements ClusterBus {
  readonly replicaId = randomUUID();
  protected readonly handlers: ((event: ClusterEvent) => void)[] = [];
  constructor(protected readonly log: Logger) {}
  abstract publish(event: ClusterEvent): void;
  abstract close(): Promise<void>;
  onEvent(handler: (event: ClusterEvent) => void): void {
    this.handlers.push(handler);
  }
  protected deliver(event: ClusterEvent): void {
    for (const h of this.handlers) {
      try {
        h(event);
      } catch (err) {
        this.log.error({ event: event.kind, error: (err as Error).message }, "cluster event failed");
      }
    }
  }
}

/** Replicas in this process (the embedded database has only one; tests may start several). */
const local = new Map<string, Set<LocalBus>>();

class LocalBus extends BaseBus {
  constructor(
    private readonly scope: string,
    log: Logger,
  ) {
    super(log);
    const peers = local.get(scope) ?? new Set();
    peers.add(this);
    local.set(scope, peers);
  }
  publish(event: ClusterEvent): void {
    for (const peer of local.get(this.scope) ?? []) if (peer !== this) queueMicrotask(() => peer.deliver(event));
  }
  async close(): Promise<void> {
    local.get(this.scope)?.delete(this);
  }
}

/** PostgreSQL LISTEN/NOTIFY: published through the pool, heard on a connection of its own. */
class PgBus extends BaseBus {
  private client: pg.Client | undefined;
  private closed = false;
  private retry: NodeJS.Timeout | undefined;
  private lost = false;

  constructor(
    private readonly prisma: PrismaClient,
    private readonly url: string,
    log: Logger,
    /** A database outage is reported there once, not by every reconnect here. */
    private readonly outage?: OutageSink,
  ) {
    super(log);
  }

  async start(): Promise<void> {
    const { connectionString, describe, secrets } = parsePostgresUrl(this.url);
    const client = new pg.Client({ connectionString, application_name: "modelforge-cluster", keepAlive: true });
    const again = (err: unknown) => {
      if (this.closed || this.client !== client) return;
      this.client = undefined;
      client.end().catch(() => undefined);
      if (!this.lost)
        this.log.warn({ db: describe, error: redact((err as Error).message, secrets) }, "cluster listener lost; reconnecting");
      this.lost = true;
      this.retry = setTimeout(() => void this.start().catch(() => undefined), 1_000);
    };
    this.client = client;
    client.on("error", again);
    client.on("end", () => again(new Error("connection ended")));
    client.on("notification", (n) => {
      if (n.channel !== channel || n.payload === undefined) return;
      let message: { from: string; event: ClusterEvent };
      try {
        message = JSON.parse(n.payload) as { from: string; event: ClusterEvent };
      } catch {
        return;
      }
      if (message.from !== this.replicaId) this.deliver(message.event);
    });
    try {
      await client.connect();
      await client.query(`LISTEN ${channel}`);
    } catch (err) {
      again(err);
      throw err;
    }
    if (this.lost) this.log.debug({ db: describe }, "cluster listener back");
    this.lost = false;
  }

  publish(event: ClusterEvent): void {
    for (const part of split(event)) {
      const payload = JSON.stringify({ from: this.replicaId, event: part });
      this.prisma.$executeRaw`SELECT pg_notify(${channel}, ${payload})`.catch((err: unknown) => {
        if (!this.closed && !this.outage?.failed(err))
          this.log.warn({ event: part.kind, error: (err as Error).message }, "cluster notification not sent");
      });
    }
  }

  async close(): Promise<void> {
    this.closed = true;
    clearTimeout(this.retry);
    const client = this.client;
    this.client = undefined;
    await client?.end().catch(() => undefined);
  }
}

/** The bus for this database: LISTEN/NOTIFY on PostgreSQL, in-process for the embedded one. */
export async function openClusterBus(opts: {
  prisma: PrismaClient;
  databaseUrl: string | undefined;
  dataDir: string;
  log: Logger;
  outage?: OutageSink;
}): Promise<ClusterBus> {
  if (opts.databaseUrl === undefined) return new LocalBus(opts.dataDir, opts.log);
  const bus = new PgBus(opts.prisma, opts.databaseUrl, opts.log, opts.outage);
  // A listener that cannot connect now keeps retrying; the sweeps cover meanwhile.
  await bus.start().catch(() => undefined);
  return bus;
}
