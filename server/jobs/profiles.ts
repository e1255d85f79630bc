// A job names a runtime profile; its lease carries the profile as the control plane holds it. So
// an agent only ever runs a record an operator created, never parameters a job made up.
import { clone } from "@bufbuild/protobuf";
import { Code, ConnectError } from "@connectrpc/connect";
import { JobSpecSchema, type JobSpec, type RuntimeProfileSpec } from "../../gen/proto/modelforge/jobs/v1/jobs_pb.js";

export interface ProfileLookup {
  /** The resolved spec of a profile name; undefined when none exists. */
  spec(name: string): Promise<RuntimeProfileSpec | undefined>;
}

/**
 * The spec with its runtime profile resolved (runtime.probe.v1, deployment.load.v1); other specs
 * as they are. A spec that carries a profile already must carry exactly the stored one.
 */
export async function withResolvedProfile(spec: JobSpec, profiles: ProfileLookup): Promise<JobSpec> {
  const kind = spec.kind;
  if (kind.case !== "runtimeProbe" && kind.case !== "deploymentLoad") return spec;
  const field = kind.case === "runtimeProbe" ? "spec.runtime_probe" : "spec.deployment_load";
  const name = kind.value.runtimeProfile;
  const stored = await profiles.spec(name);
  if (stored === undefined) {
    throw new ConnectError(
      `${field}.runtime_profile: runtime profile "${name}" not found; create it with 'forge runtimes create'`,
      Code.NotFound,
    );
  }
  const given = kind.value.profile;
  if (given !== undefined && given.contentHash !== stored.contentHash) {
    throw new ConnectError(
      `${field}.profile: does not match runtime profile "${name}" (content hash ${stored.contentHash}); leave it unset and the server fills it in`,
      Code.FailedPrecondition,
    );
  }
  const resolved = clone(JobSpecSchema, spec);
  if (resolved.kind.case === "runtimeProbe" || resolved.kind.case === "deploymentLoad") resolved.kind.value.profile = stored;
  return resolved;
}
