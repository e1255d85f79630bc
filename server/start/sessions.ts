// Who is connected: the registry of open Session streams, the heartbeats they bring (flushed in
// batches), liveness from them, and the gate that bounds how many sessions open at once.
import type { Config } from "../config.js";
import type { ServerMetrics } from "../observability/metrics.js";
import { fleetCounts } from "../observability/metrics-db.js";
import { SessionRegistry, shuttingDown } from "../sessions/registry.js";
import { Admission } from "../sessions/admission.js";
import { revokedSessionSweeper } from "../sessions/revocation.js";
import { HeartbeatBook } from "../liveness/heartbeats.js";
import { LivenessTracker } from "../liveness/tracker.js";
import { reconcileLiveness } from "../liveness/reconciler.js";
import type { Cluster } from "./cluster.js";
import type { Loop } from "./loops.js";
import type { Core } from "./core.js";

export interface SessionsDeps extends Core {
  config: Pick<Config, "staleAfterMs" | "offlineAfterMs" | "livenessFlushIntervalMs" | "reconcileIntervalMs">;
  cluster: Cluster;
  /** Aborted when shutdown begins: every session then ends. */
  shutdown: AbortSignal;
  metrics: ServerMetrics | undefined;
  /** Session opens at a time and waiting. */
  opens: { concurrent: number; queued: number };
}

export function openSessions(deps: SessionsDeps) {
  const { config, clock, log, db, cluster } = deps;
  const { prisma } = db;
  const replicaId = cluster.bus.replicaId;
  const registry = new SessionRegistry((event) => cluster.bus.publish(event));
  // One listener for all sessions: with one per session, every open scanned all of them
  // (EventTarget checks each add for a duplicate), which showed in a restart storm of thousands.
  deps.shutdown.addEventListener("abort", () => registry.closeAll(shuttingDown()), { once: true });
  const heartbeats = new HeartbeatBook(Math.min(5_000, config.staleAfterMs / 3));
  const liveness = new LivenessTracker(heartbeats, { staleAfterMs: config.staleAfterMs, offlineAfterMs: config.offlineAfterMs }, clock);
  const admission = new Admission(deps.opens.concurrent, deps.opens.queued);
  deps.metrics?.observe({ sessions: registry, admission, fleet: () => fleetCounts(prisma) });
  const holderOf = (nodeId: string) => (registry.isConnected(nodeId) ? replicaId : null);
  const flush = () => heartbeats.flush(db.direct, holderOf, replicaId);
  const loops: Loop[] = [
    {
      name: "heartbeat flush",
      everyMs: config.livenessFlushIntervalMs,
      run: () => (deps.metrics ? deps.metrics.flushed(flush) : flush()),
      outage: db.outage,
    },
    {
      name: "liveness",
      everyMs: config.reconcileIntervalMs,
      run: async () => cluster.leadership.isLeader() && (await reconcileLiveness({ prisma, clock, liveness, log })),
      outage: db.outage,
    },
    {
      name: "revoked sessions",
      everyMs: config.reconcileIntervalMs,
      run: revokedSessionSweeper({ prisma, clock, sessions: registry }),
      outage: db.outage,
    },
  ];
  return {
    registry,
    heartbeats,
    liveness,
    admission,
    loops,
    /** The last heartbeats, written once the sessions have ended. */
    async close() {
      await heartbeats
        .flush(db.direct, holderOf)
        .catch((err: unknown) => log.warn({ error: (err as Error).message }, "final heartbeat flush failed"));
    },
  };
}

export type Sessions = ReturnType<typeof openSessions>;
