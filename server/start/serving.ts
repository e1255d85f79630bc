// Serving: service clients' invokes relayed over the serving node's Session, forwarded to the
// replica that holds it when that is another (replicas find each other through the database; on
// the embedded database there is only this one), counted per minute, and runtime log watches.
import { replicaUrlOf, type Config } from "../config.js";
import type { Ca } from "../identity/pki/ca.js";
import { registerReplica, replicaAliveMs, replicaDirectory, replicaRefreshMs } from "../cluster/replicas.js";
import { InvokeRelay } from "../invoke/relay.js";
import type { Drain } from "../invoke/drain.js";
import { InvokeCounts } from "../invoke/counts.js";
import { LogWatches } from "../invoke/logs.js";
import { ReplicaForwarder } from "../invoke/forward.js";
import { deploymentService } from "../api/deployment.js";
import { adminDeploymentLogs } from "../invoke/admin-rpc.js";
import { UsageLedger } from "../usage/ledger.js";
import { adminUsage } from "../usage/report.js";
import { KeyLimiter } from "../usage/limits.js";
import { openElastic } from "./elastic.js";
import { PrefixRouting } from "../invoke/prefix-routing.js";
import { defaultPrefixPolicy } from "../invoke/prefix-rules.js";
import type { Cluster } from "./cluster.js";
import type { Sessions } from "./sessions.js";
import type { Deployments } from "./deployments.js";
import type { Loop } from "./loops.js";
import type { Core } from "./core.js";
import type { ServerMetrics } from "../observability/metrics.js";

export interface ServingDeps extends Core {
  config: Pick<
    Config,
    | "databaseUrl"
    | "replicaUrl"
    | "serverNames"
    | "usageFlushMs"
    | "invokeMaxUnreadBytes"
    | "autoscaleIntervalMs"
    | "autoscaleWindowMs"
    | "coldStartMaxHeld"
    | "coldStartKeepAliveMs"
    | "prefixRouting"
    | "prefixIndexBudgetBytes"
    | "prefixOverloadMargin"
  >;
  ca: Ca;
  cluster: Cluster;
  sessions: Sessions;
  deployments: Deployments;
  /** The port this replica listens on, for its record. */
  port: number;
  shutdown: AbortSignal;
  /** The invokes in flight, drained before the sessions close on a graceful stop. */
  drain: Drain;
  metrics: ServerMetrics | undefined;
  /** How often the invocation counts are written (default a minute). */
  countsFlushMs?: number;
}

export async function openServing(deps: ServingDeps) {
  const { clock, db } = deps;
  const { prisma } = db;
  const replicaId = deps.cluster.bus.replicaId;
  const routes = deps.deployments.routes;
  const counts = new InvokeCounts();
  const usage = new UsageLedger(() => clock.now());
  // The replicas sharing the keys' limits, as last counted: each one's share while the database is away.
  let liveReplicas = 1;
  const limits = new KeyLimiter({ prisma, clock, replicas: () => liveReplicas });
  const logs = new LogWatches(deps.sessions.registry);
  const { replica, forwarder } = await openForwarding(deps, replicaId);
  const elastic = openElastic({ ...deps, routes, replicaId });
  const prefix = deps.config.prefixRouting
    ? new PrefixRouting({
        budgetBytes: deps.config.prefixIndexBudgetBytes,
        policy: { ...defaultPrefixPolicy, overloadMargin: deps.config.prefixOverloadMargin },
        metrics: deps.metrics?.prefixRouting,
      })
    : undefined;
  if (prefix !== undefined) deps.metrics?.observePrefixIndex(() => prefix.sizes());
  const relay = new InvokeRelay({
    sessions: deps.sessions.registry,
    routes,
    clock,
    log: deps.log,
    counts,
    logs,
    forwarder,
    outage: db.outage,
    drain: deps.drain,
    usage,
    metrics: deps.metrics?.serving,
    limits,
    maxUnreadBytes: deps.config.invokeMaxUnreadBytes,
    coldStarts: elastic.coldStarts,
    activity: elastic.activity,
    prefix,
  });
  const loops: Loop[] = [
    ...elastic.loops,
    {
      name: "invoke counts",
      everyMs: deps.countsFlushMs ?? 60_000,
      run: () => counts.flush(prisma, new Date(clock.now())),
      outage: db.outage,
    },
    {
      name: "usage",
      everyMs: deps.config.usageFlushMs,
      run: async () => {
        await usage.flush(prisma);
        await limits.flush();
      },
      outage: db.outage,
    },
    ...(replica !== undefined
      ? [
          {
            name: "replica record",
            everyMs: replicaRefreshMs,
            run: async () => {
              await replica.refresh();
              const aliveSince = new Date(clock.now() - replicaAliveMs);
              liveReplicas = Math.max(1, await prisma.controlPlaneReplica.count({ where: { seenAt: { gte: aliveSince } } }));
            },
            outage: db.outage,
          },
        ]
      : []),
  ];
  return {
    relay,
    activity: elastic.activity,
    loops,
    service: deploymentService(relay, routes),
    adminRpcs: { ...adminDeploymentLogs({ routes, logs, shutdown: deps.shutdown }), ...adminUsage(prisma, clock) },
    /** Forwarding ends and the other replicas stop looking for sessions here. */
    async close() {
      forwarder?.close();
      await counts
        .flush(prisma, new Date(clock.now()))
        .catch((err: unknown) => deps.log.warn({ error: (err as Error).message }, "final invoke counts flush failed"));
      await usage
        .flush(prisma)
        .catch((err: unknown) =>
          deps.log.warn({ error: (err as Error).message }, "final usage flush failed: the counts since the last flush are lost"),
        );
      await replica
        ?.remove()
        .catch((err: unknown) => deps.log.warn({ error: (err as Error).message }, "removing the replica record failed"));
    },
  };
}

/** On PostgreSQL: this replica's record, and the forwarder to the replicas holding other nodes' sessions. */
async function openForwarding(deps: ServingDeps, replicaId: string) {
  const { clock, db } = deps;
  const { prisma } = db;
  if (deps.config.databaseUrl === undefined) return { replica: undefined, forwarder: undefined };
  const replica = await registerReplica({ prisma, clock, replicaId, url: replicaUrlOf(deps.config, deps.port) });
  const forwarder = new ReplicaForwarder({
    directory: replicaDirectory({ prisma, clock, replicaId }),
    clock,
    replicaId,
    caPem: deps.ca.certPem,
    outage: db.outage,
  });
  return { replica, forwarder };
}

export type Serving = Awaited<ReturnType<typeof openServing>>;
