// Deployment rows to admin API messages.
import { create } from "@bufbuild/protobuf";
import { durationFromMs } from "@bufbuild/protobuf/wkt";
import {
  DeploymentDesiredState,
  DeploymentEventSchema,
  DeploymentInstanceSchema,
  DeploymentRecordSchema,
  DeploymentReplicaSchema,
  DeploymentAutoscalingSchema,
  ScalingEventSchema,
  type DeploymentRecord,
} from "../../gen/proto/modelforge/admin/v1/admin_pb.js";
import { DeploymentSchema, DeploymentState } from "../../gen/proto/modelforge/deployment/v1/deployment_pb.js";
import type { AuditEvent, Deployment, DeploymentEvent, DeploymentInstance } from "../../gen/prisma/client.js";
import { stringMap, ts } from "../rpc/convert.js";
import { newestRevisionFirst } from "./rules.js";
import { assignedGpus } from "./specs.js";

const stateOf: Record<string, DeploymentState> = {
  pending: DeploymentState.PENDING,
  degraded: DeploymentState.DEGRADED,
  loading: DeploymentState.LOADING,
  ready: DeploymentState.READY,
  draining: DeploymentState.DRAINING,
  unloaded: DeploymentState.UNLOADED,
  failed: DeploymentState.FAILED,
};
const desiredOf: Record<string, DeploymentDesiredState> = {
  serving: DeploymentDesiredState.SERVING,
  drained: DeploymentDesiredState.DRAINED,
  unloaded: DeploymentDesiredState.UNLOADED,
  deleted: DeploymentDesiredState.DELETED,
};
export const deploymentStateOf = (s: string | null): DeploymentState =>
  s === null ? DeploymentState.UNSPECIFIED : (stateOf[s] ?? DeploymentState.UNSPECIFIED);

/** Requests in flight on a replica (its deployment, revision and slot), through this control-plane replica. */
export type InFlightOf = (deploymentId: string, revision: bigint, replica: number) => number;

type Row = Deployment & { instances: DeploymentInstance[] };

/** What GetDeployment lists as replicas: the wanted slots of the current revision, then whatever else still runs. */
function replicasOf(d: Row, inFlight: InFlightOf) {
  const wanted = (i: DeploymentInstance) => i.revision === d.revision && i.replica < d.replicas;
  const running = (i: DeploymentInstance) => i.phase === "loading" || i.phase === "ready" || i.phase === "draining";
  return d.instances
    .filter((i) => wanted(i) || running(i))
    .sort(newestRevisionFirst)
    .map((i) =>
      create(DeploymentReplicaSchema, {
        index: i.replica,
        revision: i.revision,
        nodeId: i.nodeId ?? "",
        state: deploymentStateOf(i.phase),
        inFlight: i.nodeId === null ? 0 : inFlight(d.id, i.revision, i.replica),
        reason: i.reason ?? "",
        restarts: i.restarts,
        gpus: assignedGpus(i),
      }),
    );
}

/** The node v1's Deployment.node_id names: a ready replica's, else the pinned node, else any placed one. */
function nodeOf(d: Row): string {
  const ready = d.instances.filter((i) => i.phase === "ready" && i.nodeId !== null).sort((a, b) => a.replica - b.replica);
  return ready[0]?.nodeId ?? d.nodeId ?? d.instances.find((i) => i.nodeId !== null)?.nodeId ?? "";
}

export function recordToProto(d: Row, inFlight: InFlightOf = () => 0): DeploymentRecord {
  return create(DeploymentRecordSchema, {
    deployment: create(DeploymentSchema, {
      id: d.id,
      name: d.name,
      nodeId: nodeOf(d),
      state: deploymentStateOf(d.state),
      revision: d.revision,
      failureReason: d.failureReason ?? "",
      createdAt: ts(d.createdAt),
      updatedAt: ts(d.updatedAt),
    }),
    desired: desiredOf[d.desired] ?? DeploymentDesiredState.UNSPECIFIED,
    runtimeProfile: d.runtimeProfile,
    repository: d.repository,
    commit: d.commit,
    targetRoot: d.targetRoot,
    maxInFlight: d.maxInFlight,
    invokeTimeout: durationFromMs(d.invokeTimeoutMs),
    drainTimeout: durationFromMs(d.drainTimeoutMs),
    selector: stringMap(d.selector),
    modelFile: d.modelFile,
    replicas: replicasOf(d, inFlight),
    desiredReplicas: d.replicas,
    maxPerNode: d.maxPerNode,
    readyReplicas: d.instances.filter((i) => i.phase === "ready").length,
    ...(d.autoscale
      ? {
          autoscaling: create(DeploymentAutoscalingSchema, {
            minReplicas: d.minReplicas,
            maxReplicas: d.maxReplicas,
            targetInFlight: d.targetInFlight,
            upscaleDelay: durationFromMs(d.upscaleDelayMs),
            downscaleDelay: durationFromMs(d.downscaleDelayMs),
            scaleToZeroAfter: durationFromMs(d.scaleToZeroAfterMs),
            coldStartTimeout: durationFromMs(d.coldStartTimeoutMs),
            priority: d.priority,
          }),
        }
      : {}),
    instances: [...d.instances].sort(newestRevisionFirst).map((i) =>
      create(DeploymentInstanceSchema, {
        revision: i.revision,
        replica: i.replica,
        nodeId: i.nodeId ?? "",
        state: deploymentStateOf(i.phase),
        step: i.step ?? "",
        jobId: i.jobId ?? "",
        runtimeId: i.runtimeId ?? "",
        reason: i.reason ?? "",
        runtimeProfile: i.runtimeProfile,
        commit: i.commit,
        modelFile: i.modelFile,
        updatedAt: ts(i.updatedAt),
      }),
    ),
  });
}

export const eventToProto = (e: DeploymentEvent) =>
  create(DeploymentEventSchema, {
    time: ts(e.time),
    revision: e.revision,
    replica: e.replica,
    nodeId: e.nodeId ?? "",
    fromState: deploymentStateOf(e.fromPhase),
    toState: deploymentStateOf(e.toPhase),
    reason: e.reason ?? "",
  });

/** The audit actions that change a deployment's wanted replicas. */
export const scalingActions = ["deployment.scaled", "deployment.autoscaled", "deployment.autoscaling_set", "deployment.evicted"];

/** One of those audit events as GetDeployment lists it. */
export function scalingEventOf(e: AuditEvent): ReturnType<typeof create<typeof ScalingEventSchema>> {
  const details = (e.details ?? {}) as Record<string, unknown>;
  const text = (k: string) => (typeof details[k] === "string" ? (details[k] as string) : "");
  const count = (k: string) => Number.parseInt(text(k), 10) || 0;
  const reason =
    text("reason") || (e.action === "deployment.autoscaling_set" ? `autoscaling set: ${text("autoscaling")}` : "set by the operator");
  return create(ScalingEventSchema, {
    time: ts(e.time),
    fromReplicas: count("from"),
    toReplicas: count("to"),
    actor: e.actorName ?? e.actor,
    reason,
  });
}
