// Elastic serving on this replica: the load it reports for the autoscaler (sampled, averaged over
// the window, written every interval), and the hold where requests wait for a replica to load.
import type { Config } from "../config.js";
import type { Drain } from "../invoke/drain.js";
import { ServingActivity, writeLoadReports } from "../invoke/activity.js";
import { ColdStarts } from "../invoke/cold-start.js";
import type { DeploymentRoutes } from "../deployments/routes.js";
import type { ServerMetrics } from "../observability/metrics.js";
import type { Deployments } from "./deployments.js";
import type { Loop } from "./loops.js";
import type { Core } from "./core.js";

export interface ElasticDeps extends Core {
  config: Pick<Config, "autoscaleIntervalMs" | "autoscaleWindowMs" | "coldStartMaxHeld" | "coldStartKeepAliveMs">;
  deployments: Pick<Deployments, "wake">;
  routes: DeploymentRoutes;
  replicaId: string;
  drain: Drain;
  metrics: ServerMetrics | undefined;
}

export function openElastic(deps: ElasticDeps) {
  const { clock, db, config } = deps;
  // Five samples per report: a short burst between two reports still moves the average.
  const sampleMs = Math.max(50, Math.floor(config.autoscaleIntervalMs / 5));
  const activity = new ServingActivity(Math.max(1, Math.ceil(config.autoscaleWindowMs / sampleMs)));
  const coldStarts = new ColdStarts({
    clock,
    log: deps.log,
    routes: deps.routes,
    wake: (target) => deps.deployments.wake(target),
    maxHeld: config.coldStartMaxHeld,
    keepAliveMs: config.coldStartKeepAliveMs,
    holding: (deploymentId, delta) => activity.holding(deploymentId, delta),
    metrics: deps.metrics?.coldStarts,
  });
  // A stopping replica answers its held requests at once (retryable elsewhere) rather than letting them wait out the grace.
  deps.drain.onBegin(() => coldStarts.stop());
  const loops: Loop[] = [
    { name: "serving load samples", everyMs: sampleMs, run: async () => activity.sample() },
    {
      name: "serving load reports",
      everyMs: config.autoscaleIntervalMs,
      run: async () => {
        const rows = activity.report();
        if (rows.length > 0) await writeLoadReports(db.prisma, deps.replicaId, rows, new Date(clock.now()));
      },
      outage: db.outage,
    },
  ];
  return { activity, coldStarts, loops };
}
