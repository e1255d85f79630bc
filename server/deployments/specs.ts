// The job spec of each step of an instance: built from the deployment's record and the artifact
// store's index of the commit's files, never from anything a node said.
import { join } from "node:path";
import { create } from "@bufbuild/protobuf";
import { durationFromMs } from "@bufbuild/protobuf/wkt";
import { JobSpecSchema, type JobSpec } from "../../gen/proto/modelforge/jobs/v1/jobs_pb.js";
import type { CreateJobInput } from "../jobs/create.js";
import type { Step } from "./rules.js";

export interface StepInput {
  deploymentId: string;
  revision: bigint;
  /** The replica slot; undefined names every replica of the revision (an older agent's runtime). */
  replica: number | undefined;
  runtimeProfile: string;
  repository: string;
  commit: string;
  /** The file of the commit the runtime loads; "" for an instance from before it was stored. */
  modelFile: string;
  targetRoot: string;
  drainTimeoutMs: number;
  files: { path: string; sizeBytes: bigint; sha256: string }[];
  /** The GPUs placement assigned the replica (UUID and index); empty for a CPU replica. */
  gpus?: { uuid: string; index: number }[];
  /** Requests the replica generates at once (placement's choice); 0 for the engine's own scheduling. */
  parallel?: number;
}

/** The GPUs recorded on a replica, each UUID with its index (two columns, in step). */
export function assignedGpus(i: { gpuUuids: string[]; gpuIndices: number[] }): { uuid: string; index: number }[] {
  return i.gpuUuids.map((uuid, k) => ({ uuid, index: i.gpuIndices[k] ?? 0 }));
}

/** The capability a step needs the node to run. */
export const capabilityOfStep: Record<Step, string> = {
  acquire: "artifact.acquire.v1",
  load: "deployment.load.v1",
  drain: "deployment.drain.v1",
  unload: "deployment.unload.v1",
};

export function specOfStep(step: Step, i: StepInput): JobSpec {
  const { deploymentId, revision } = i;
  const replica = i.replica === undefined ? {} : { replica: i.replica };
  // Where artifact.acquire.v1 promotes a commit: <root>/<repository>/<commit>/<path>.
  const onNode = (path: string) => join(i.targetRoot, i.repository, i.commit, path);
  switch (step) {
    case "acquire":
      return create(JobSpecSchema, {
        kind: {
          case: "artifactAcquire",
          value: { repository: i.repository, commit: i.commit, files: i.files, targetRoot: i.targetRoot },
        },
      });
    case "load":
      return create(JobSpecSchema, {
        kind: {
          case: "deploymentLoad",
          value: {
            deploymentId,
            revision,
            ...replica,
            runtimeProfile: i.runtimeProfile,
            artifacts: i.files.map((f) => ({ path: onNode(f.path), sha256: f.sha256 })),
            // Empty for an instance from before the model file was stored: the agent applies the rule.
            modelFile: i.modelFile === "" ? "" : onNode(i.modelFile),
            gpus: i.gpus ?? [],
            parallel: i.parallel ?? 0,
          },
        },
      });
    case "drain":
      return create(JobSpecSchema, {
        kind: { case: "deploymentDrain", value: { deploymentId, revision, ...replica, timeout: durationFromMs(i.drainTimeoutMs) } },
      });
    case "unload":
      return create(JobSpecSchema, { kind: { case: "deploymentUnload", value: { deploymentId, revision, ...replica } } });
  }
}

/**
 * The job that stops a runtime a node holds and should not (a stray its Hello named, or a replica
 * that left a node still up): ordered with the deployment's other steps, so a load placed there
 * afterwards runs after it.
 */
export function unloadOnNode(
  nodeId: string,
  held: { deploymentId: string; revision: bigint; replica: number | undefined },
): CreateJobInput {
  const { deploymentId } = held;
  return {
    nodeId,
    spec: create(JobSpecSchema, {
      kind: {
        case: "deploymentUnload",
        value: { deploymentId, revision: held.revision, ...(held.replica === undefined ? {} : { replica: held.replica }) },
      },
    }),
    orderingKey: deploymentId,
    maxAttempts: 0,
    correlationId: `deployment:${deploymentId}`,
  };
}
