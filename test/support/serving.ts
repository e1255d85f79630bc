// Serving a model in tests: a node whose real agent runs runtimes, a file put into the control
// plane's artifact store in one chunk, and a deployment created and waited READY.
import { readFileSync, writeFileSync } from "node:fs";
import type { Client } from "@connectrpc/connect";
import type { MessageInitShape } from "@bufbuild/protobuf";
import type { AdminService, CreateDeploymentRequestSchema } from "../../gen/proto/modelforge/admin/v1/admin_pb.js";
import { DeploymentState } from "../../gen/proto/modelforge/deployment/v1/deployment_pb.js";
import { EngineKind } from "../../gen/proto/modelforge/jobs/v1/jobs_pb.js";
import { llamaServerPath } from "../../agent/engines/supervisor.js";
import { enrollTestNode, eventually, type TestNode } from "./node.js";
import { spawnAgent, type AgentProcess } from "./process.js";
import type { TestServer } from "./server.js";

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
export async function deployReady(admin: Admin, spec: MessageInitShape<typeof CreateDeploymentRequestSchema> & { name: string }) {
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

/** The error-level lines (pino level 50 and up) of a JSON log: our own faults, never a caller's bad input. */
export function errorLines(log: string): string[] {
  return log.split("\n").filter((l) => l.startsWith("{") && (JSON.parse(l) as { level: number }).level >= 50);
}

/**
 * A node enrolled as `name` whose real agent runs runtimes from artifacts under `root`, online and
 * advertising deployment.load.v1, with runtime profile "tiny-cpu" (llama.cpp, one thread).
 */
export async function servingNode(
  ts: TestServer,
  root: string,
  name: string,
  contextSize: number,
): Promise<{ node: TestNode; agent: AgentProcess }> {
  const node = await enrollTestNode(ts, name);
  await ts.admin.createRuntimeProfile({ name: "tiny-cpu", engine: EngineKind.LLAMA_CPP, contextSize, threads: 1 });
  return { node, agent: await spawnServingAgent(ts.admin, node, root) };
}

/** A real agent process that runs runtimes from models under `root` fetched from the control plane, waited until deployments can be placed on it (`entry`: as spawnAgent's). */
export async function spawnServingAgent(
  admin: Admin,
  node: Pick<TestNode, "nodeId" | "statePath">,
  root: string,
  env: Record<string, string> = {},
  entry?: string[],
): Promise<AgentProcess> {
  const agentEnv = {
    MODELFORGE_AGENT_RUNTIMES: "on",
    MODELFORGE_AGENT_ARTIFACT_SOURCES: "control-plane",
    MODELFORGE_AGENT_ARTIFACT_ROOTS: root,
  };
  const agent = spawnAgent(node.statePath, { ...agentEnv, ...env }, entry);
  // Placement fits a model to a node's telemetry: a node without any yet fits nowhere.
  await eventually(
    async () => {
      const n = await admin.getNode({ nodeId: node.nodeId });
      return n.node!.capabilities.includes("deployment.load.v1") && n.telemetry !== undefined;
    },
    60_000,
    "the agent online, advertising deployment.load.v1, its telemetry in",
  ).catch(async (err: unknown) => {
    await agent.kill();
    throw err;
  });
  return agent;
}

/**
 * Writes an openai-http template (MODELFORGE_AGENT_OPENAI_HTTP_TEMPLATE) at `path` whose external
 * server is llama-server itself, run as an operator would run it.
 */
export function writeLlamaServerTemplate(path: string): void {
  writeFileSync(
    path,
    JSON.stringify({
      command: [llamaServerPath, "--model", "{model}", "--host", "{host}", "--port", "{port}", "--threads", "{threads}", "--no-webui"],
    }),
  );
}
