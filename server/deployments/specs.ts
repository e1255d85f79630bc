// The job spec of each step of an instance: built from the deployment's record and the artifact
// store's index of the commit's files, never from anything a node said.
import { join } from "node:path";
import { create } from "@bufbuild/protobuf";
import { durationFromMs } from "@bufbuild/protobuf/wkt";
import { JobSpecSchema, type JobSpec } from "../../gen/proto/modelforge/jobs/v1/jobs_pb.js";
import type { Step } from "./rules.js";

export interface StepInput {
  deploymentId: string;
  revision: bigint;
  runtimeProfile: string;
  repository: string;
  commit: string;
  targetRoot: string;
  drainTimeoutMs: number;
  files: { path: string; sizeBytes: bigint; sha256: string }[];
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
            runtimeProfile: i.runtimeProfile,
            // Where artifact.acquire.v1 promotes a commit: <root>/<repository>/<commit>/<path>.
            artifacts: i.files.map((f) => ({ path: join(i.targetRoot, i.repository, i.commit, f.path), sha256: f.sha256 })),
          },
        },
      });
    case "drain":
      return create(JobSpecSchema, {
        kind: { case: "deploymentDrain", value: { deploymentId, revision, timeout: durationFromMs(i.drainTimeoutMs) } },
      });
    case "unload":
      return create(JobSpecSchema, { kind: { case: "deploymentUnload", value: { deploymentId, revision } } });
  }
}
