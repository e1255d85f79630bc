// Serving a model in tests: a file put into the control plane's artifact store in one chunk, and a
// deployment created and waited READY.
import { readFileSync } from "node:fs";
import type { Client } from "@connectrpc/connect";
import type { MessageInitShape } from "@bufbuild/protobuf";
import type { AdminService, CreateDeploymentRequestSchema } from "../../gen/proto/modelforge/admin/v1/admin_pb.js";
import { DeploymentState } from "../../gen/proto/modelforge/deployment/v1/deployment_pb.js";
import { eventually } from "./node.js";

type Admin = Client<typeof AdminService>;

/** The file at `file` in the artifact store as `path` of repository@commit. */
export async function storeArtifact(admin: Admin, at: { repository: string; commit: string; path: string }, file: string, sha256: string) {
  const data = readFileSync(file);
  await admin.uploadArtifactChunk({ ...at, sizeBytes: BigInt(data.length), sha256, offset: 0n, data });
}

/** Waits for the node's first telemetry: placement refuses a node whose disk and memory are unknown. */
export async function telemetryArrived(admin: Admin, nodeId: string) {
  await eventually(async () => (await admin.getNode({ nodeId })).telemetry !== undefined, 60_000, `telemetry of node ${nodeId}`);
}

/** Creates the deployment and waits until it is READY; its id. */
async function deployReady(admin: Admin, spec: MessageInitShape<typeof CreateDeploymentRequestSchema> & { name: string }) {
  if (typeof spec.nodeId === "string" && spec.nodeId !== "") await telemetryArrived(admin, spec.nodeId);
  const created = await admin.createDeployment(spec);
  await eventually(
    async () => (await admin.getDeployment({ deployment: spec.name })).deployment!.deployment!.state === DeploymentState.READY,
    90_000,
    `${spec.name} READY`,
  );
  return created.deployment!.deployment!.id;
}

/**
 * The tiny GGUF at `file` stored as acme/tiny@commit and served as deployment "tiny" on the node
 * (profile "tiny-cpu", which the caller creates; 8 requests in flight), waited READY; its id.
 */
export async function serveTiny(admin: Admin, at: { nodeId: string; commit: string; root: string; file: string; sha256: string }) {
  await storeArtifact(admin, { repository: "acme/tiny", commit: at.commit, path: "tiny.gguf" }, at.file, at.sha256);
  return deployReady(admin, {
    name: "tiny",
    nodeId: at.nodeId,
    runtimeProfile: "tiny-cpu",
    repository: "acme/tiny",
    commit: at.commit,
    targetRoot: at.root,
    maxInFlight: 8,
  });
}
