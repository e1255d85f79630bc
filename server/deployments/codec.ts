// Deployment rows to admin API messages.
import { create } from "@bufbuild/protobuf";
import { durationFromMs } from "@bufbuild/protobuf/wkt";
import {
  DeploymentDesiredState,
  DeploymentEventSchema,
  DeploymentInstanceSchema,
  DeploymentRecordSchema,
  type DeploymentRecord,
} from "../../gen/proto/modelforge/admin/v1/admin_pb.js";
import { DeploymentSchema, DeploymentState } from "../../gen/proto/modelforge/deployment/v1/deployment_pb.js";
import type { Deployment, DeploymentEvent, DeploymentInstance } from "../../gen/prisma/client.js";
import { stringMap, ts } from "../rpc/convert.js";

const stateOf: Record<string, DeploymentState> = {
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

export function recordToProto(d: Deployment & { instances: DeploymentInstance[] }): DeploymentRecord {
  return create(DeploymentRecordSchema, {
    deployment: create(DeploymentSchema, {
      id: d.id,
      name: d.name,
      nodeId: d.nodeId,
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
    instances: [...d.instances]
      .sort((a, b) => (a.revision > b.revision ? -1 : 1))
      .map((i) =>
        create(DeploymentInstanceSchema, {
          revision: i.revision,
          nodeId: i.nodeId,
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
    nodeId: e.nodeId,
    fromState: deploymentStateOf(e.fromPhase),
    toState: deploymentStateOf(e.toPhase),
    reason: e.reason ?? "",
  });
