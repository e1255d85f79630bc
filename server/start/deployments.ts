// What nodes serve: the artifact store models are pushed to, and the controller that reconciles
// each deployment's desired state into jobs (its sweep only on the leader), with the routes the
// invoke relay reads.
import type { Config } from "../config.js";
import type { HeldDeployment } from "../../gen/proto/modelforge/agent/v1/agent_pb.js";
import { ArtifactStore } from "../artifacts/store.js";
import { adminArtifacts } from "../artifacts/admin-rpc.js";
import { agentArtifacts } from "../artifacts/agent-rpc.js";
import { DeploymentController } from "../deployments/controller.js";
import { adminDeployments } from "../deployments/admin-rpc.js";
import { reconcileHeld } from "../deployments/held.js";
import { deploymentRoutes, type DeploymentTarget } from "../deployments/routes.js";
import { Autoscaler, scaleTo } from "../deployments/autoscaler.js";
import type { InFlightOf } from "../deployments/codec.js";
import type { Cluster } from "./cluster.js";
import type { Jobs } from "./jobs.js";
import type { Loop } from "./loops.js";
import type { Core } from "./core.js";
import type { EvictionMetrics } from "../observability/metrics.js";

export interface DeploymentsDeps extends Core {
  config: Pick<
    Config,
    | "artifactDir"
    | "approvedRoots"
    | "reconcileIntervalMs"
    | "staleAfterMs"
    | "replaceAfterMs"
    | "autoscaleIntervalMs"
    | "autoscaleWindowMs"
    | "evictIdleAfterMs"
  >;
  cluster: Cluster;
  jobs: Jobs;
  metrics?: EvictionMetrics;
}

export function openDeployments(deps: DeploymentsDeps) {
  const { config, clock, log, db, cluster } = deps;
  const { prisma } = db;
  const jobs = deps.jobs.engine;
  const artifacts = new ArtifactStore({ prisma, clock, dir: config.artifactDir });
  // The relay opens after the deployments (it routes by them): it tells GetDeployment what is in
  // flight, and eviction what this control plane served ahead of its load reports.
  const relayed = { inFlight: (() => 0) as InFlightOf, servedSince: (_deploymentId: string, _since: number) => false };
  const controller = new DeploymentController({
    prisma,
    clock,
    log,
    jobs,
    announce: (deploymentId) => cluster.bus.publish({ kind: "deployment", deploymentId }),
    loss: { staleAfterMs: config.staleAfterMs, replaceAfterMs: config.replaceAfterMs },
    eviction: {
      idleAfterMs: config.evictIdleAfterMs,
      reportStaleMs: 3 * config.autoscaleIntervalMs,
      servedHereSince: (id, since) => relayed.servedSince(id, since),
    },
    metrics: deps.metrics,
  });
  const reconcile = (id: string) => controller.reconcile(id);
  const autoscaler = new Autoscaler({
    prisma,
    clock,
    log,
    reconcile,
    windowMs: config.autoscaleWindowMs,
    // Three report intervals: one late report is not taken for a replica gone.
    staleAfterMs: 3 * config.autoscaleIntervalMs,
  });
  const kick = (id: string) => void reconcile(id).catch((err) => log.error({ err, deploymentId: id }, "deployment reconcile failed"));
  // A step's job finished: its deployment takes the next step now rather than at the next sweep
  // (a second each), which made a cold start's acquire and load two sweeps longer than the work.
  deps.jobs.engine.onFinished((jobId) => {
    void prisma.deploymentInstance
      .findFirst({ where: { jobId }, select: { deploymentId: true } })
      .then((i) => i !== null && kick(i.deploymentId))
      .catch((err: unknown) => log.warn({ jobId, error: (err as Error).message }, "finding a finished job's deployment failed"));
  });
  const loops: Loop[] = [
    {
      name: "deployments",
      everyMs: config.reconcileIntervalMs,
      run: async () => cluster.leadership.isLeader() && (await controller.sweep()),
      outage: db.outage,
    },
    {
      name: "autoscaler",
      everyMs: config.autoscaleIntervalMs,
      run: async () => cluster.leadership.isLeader() && (await autoscaler.round()),
      outage: db.outage,
    },
  ];
  return {
    artifacts,
    controller,
    routes: deploymentRoutes(prisma, db.direct, controller),
    loops,
    /** A request is held for a deployment at zero: one replica is wanted now (true when this call set it). */
    wake(target: DeploymentTarget): Promise<boolean> {
      return scaleTo(
        { prisma, clock, log, reconcile },
        { id: target.deploymentId, name: target.name },
        0,
        1,
        "cold start: a request is held",
      );
    },
    /** A node's session opened, saying which deployment runtimes it holds. */
    held(nodeId: string, held: HeldDeployment[]) {
      return reconcileHeld({ prisma, clock, log, jobs, kick }, nodeId, held).catch((err) =>
        log.error({ err, nodeId }, "reconciling the deployments a node holds failed"),
      );
    },
    adminRpcs: {
      ...adminArtifacts(artifacts),
      ...adminDeployments({
        prisma,
        clock,
        jobs,
        approvedRoots: config.approvedRoots,
        profiles: deps.jobs.profiles,
        reconcile,
        inFlight: (deploymentId, revision, replica) => relayed.inFlight(deploymentId, revision, replica),
      }),
    },
    agentRpcs: agentArtifacts({ prisma, clock, store: artifacts }),
    /** Where GetDeployment reads each replica's requests in flight. */
    countInFlightWith(count: InFlightOf) {
      relayed.inFlight = count;
    },
    /** Where eviction reads this control plane's own latest requests, ahead of its load reports. */
    evictionSeesServing(served: (deploymentId: string, since: number) => boolean) {
      relayed.servedSince = served;
    },
  };
}

export type Deployments = ReturnType<typeof openDeployments>;
