// The model file a lease loads, shared by runtime.probe.v1 and deployment.load.v1: every leased
// artifact still has its digest (a file may change after it was acquired), and the runtime gets
// the one the server named, or, from an older server that names none, the one the rule picks (a
// commit's single .gguf); the other artifacts sit beside it for the engine to find.
import { createHash } from "node:crypto";
import { createReadStream } from "node:fs";
import { JobFailureCode, type ResolvedArtifact } from "../../gen/proto/modelforge/jobs/v1/jobs_pb.js";
import { chooseModelFile } from "../../common/model-file.js";
import { JobFailureError } from "../jobs/registry.js";

async function sha256Of(path: string): Promise<string | undefined> {
  const hash = createHash("sha256");
  try {
    for await (const chunk of createReadStream(path)) hash.update(chunk as Buffer);
  } catch {
    return undefined;
  }
  return hash.digest("hex");
}

/** The path the runtime loads, once every artifact is verified; a typed, permanent failure otherwise. */
export async function verifiedModelPath(lease: { artifacts: ResolvedArtifact[]; modelFile: string }): Promise<string> {
  const choice = chooseModelFile(
    lease.artifacts.map((a) => a.path),
    lease.modelFile,
  );
  if (!choice.ok) throw new JobFailureError(JobFailureCode.INVALID_SPEC, `no model file to load: ${choice.problem}`, false);
  for (const artifact of lease.artifacts) {
    const digest = await sha256Of(artifact.path);
    if (digest === undefined) throw new JobFailureError(JobFailureCode.NOT_FOUND, `artifact ${artifact.path} cannot be read`, false);
    if (digest !== artifact.sha256) {
      throw new JobFailureError(JobFailureCode.CHECKSUM_MISMATCH, `artifact ${artifact.path} no longer has its leased digest`, false);
    }
  }
  return choice.path;
}
