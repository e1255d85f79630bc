// Typed work for nodes: runtime profiles, and the engine that creates, leases, expires and reclaims
// jobs (its sweep runs on every replica; the reclaim part only on the leader).
import type { Config } from "../config.js";
import type { ServerMetrics } from "../observability/metrics.js";
import { JobEngine } from "../jobs/engine.js";
import { jobSettingsOf } from "../jobs/work.js";
import { agentJobs } from "../jobs/agent-rpc.js";
import { adminJobs } from "../jobs/admin-rpc.js";
import { RuntimeProfiles } from "../runtimes/store.js";
import { adminRuntimeProfiles } from "../runtimes/admin-rpc.js";
import type { Cluster } from "./cluster.js";
import type { Sessions } from "./sessions.js";
import type { Loop } from "./loops.js";
import type { Core } from "./core.js";

export interface JobsDeps extends Core {
  config: Config;
  cluster: Cluster;
  sessions: Sessions;
  shutdown: AbortSignal;
  metrics: ServerMetrics | undefined;
}

export function openJobs(deps: JobsDeps) {
  const { clock, db, cluster } = deps;
  const { prisma } = db;
  const profiles = new RuntimeProfiles({ prisma, clock });
  const engine = new JobEngine({
    prisma,
    profiles,
    clock,
    log: deps.log,
    liveness: deps.sessions.liveness,
    sessions: deps.sessions.registry,
    settings: jobSettingsOf(deps.config),
    shutdown: deps.shutdown,
    metrics: deps.metrics?.jobs,
  });
  const loops: Loop[] = [
    { name: "jobs", everyMs: deps.config.reconcileIntervalMs, run: () => engine.sweep(cluster.leadership.isLeader()), outage: db.outage },
  ];
  return {
    profiles,
    engine,
    loops,
    adminRpcs: { ...adminJobs({ prisma, engine }), ...adminRuntimeProfiles(profiles) },
    agentRpcs: agentJobs({ prisma, clock, engine }),
  };
}

export type Jobs = ReturnType<typeof openJobs>;
