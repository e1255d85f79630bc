// A cold start across two control planes on one PostgreSQL: a deployment at zero replicas, one
// request held on each plane at once, and both answered by the one replica that loads. The agent's
// Session is on A, so B's request is forwarded once the replica is ready.
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, expect, it } from "vitest";
import { DeploymentState } from "../../../gen/proto/modelforge/deployment/v1/deployment_pb.js";
import { EngineKind } from "../../../gen/proto/modelforge/jobs/v1/jobs_pb.js";
import { writeTinyLlamaGguf } from "../../../scripts/gguf.js";
import { createTestDatabase, type TestDatabase } from "../../support/db.js";
import { enrollTestNode, eventually, type TestNode } from "../../support/node.js";
import { spawnAgent, type AgentProcess } from "../../support/process.js";
import { startTwoPlanes, type TestServer } from "../../support/server.js";
import { deployReady, storeArtifact } from "../../support/serving.js";
import { postJson } from "../../support/http.js";

const commit = "f".repeat(40);

let db: TestDatabase;
let a: TestServer;
let b: TestServer;
let root: string;
let node: TestNode;
let agent: AgentProcess;
let secret: string;

beforeAll(async () => {
  root = mkdtempSync(join(tmpdir(), "mf-elastic-planes-"));
  const path = join(root, "tiny.gguf");
  const model = await writeTinyLlamaGguf(path, { contextLength: 1024 });
  db = await createTestDatabase("postgres");
  [a, b] = await startTwoPlanes(db.databaseUrl!, root, { MODELFORGE_AUTOSCALE_INTERVAL: "200ms", MODELFORGE_AUTOSCALE_WINDOW: "1s" });
  node = await enrollTestNode(a, "elastic-on-a");
  agent = spawnAgent(node.statePath, {
    MODELFORGE_AGENT_RUNTIMES: "on",
    MODELFORGE_AGENT_ARTIFACT_SOURCES: "control-plane",
    MODELFORGE_AGENT_ARTIFACT_ROOTS: root,
  });
  await eventually(async () => a.server.sessionsConnected(node.nodeId), 30_000, "the agent's session on A");
  await b.admin.createRuntimeProfile({ name: "tiny-cpu", engine: EngineKind.LLAMA_CPP, contextSize: 1024, threads: 1 });
  await storeArtifact(b.admin, { repository: "acme/tiny", commit, path: "tiny.gguf" }, path, model.sha256);
  await deployReady(b.admin, {
    name: "sleepy",
    nodeId: node.nodeId,
    runtimeProfile: "tiny-cpu",
    repository: "acme/tiny",
    commit,
    targetRoot: root,
    autoscaling: { minReplicas: 0, maxReplicas: 1, targetInFlight: 4, scaleToZeroAfter: { seconds: 3600n, nanos: 0 } },
  });
  // Loaded with a long idle time, then a short one: a busy machine's slow load is not idleness.
  await b.admin.updateDeploymentScaling({
    deployment: "sleepy",
    autoscaling: { minReplicas: 0, maxReplicas: 1, targetInFlight: 4, scaleToZeroAfter: { seconds: 1n, nanos: 0 } },
  });
  secret = (await b.admin.createServiceKey({ name: "svc", deployments: ["sleepy"] })).secret;
}, 180_000);

afterAll(async () => {
  await agent?.stop();
  await b?.stop();
  await a?.stop();
  await db?.cleanup();
  if (root) rmSync(root, { recursive: true, force: true });
});

it("holds a request on each control plane and answers both from the one replica that loads", async () => {
  await eventually(
    async () => {
      const r = (await a.admin.getDeployment({ deployment: "sleepy" })).deployment!;
      return (r.desiredReplicas === 0 && r.deployment!.state === DeploymentState.UNLOADED) || undefined;
    },
    60_000,
    "sleepy at zero",
  );
  const ask = (plane: TestServer) =>
    postJson(
      `${plane.url}/v1/completions`,
      plane.caPem,
      { model: "sleepy", prompt: "The quick brown fox", max_tokens: 4, temperature: 0 },
      {
        authorization: `Bearer ${secret}`,
      },
    );
  const [viaA, viaB] = await Promise.all([ask(a), ask(b)]);
  expect([viaA.status, viaB.status]).toEqual([200, 200]);
  expect(viaA.body).toMatchObject({ object: "text_completion" });
  expect(viaB.body).toMatchObject({ object: "text_completion" });
  const { scalingEvents, deployment } = await b.admin.getDeployment({ deployment: "sleepy" });
  // One cold start: exactly one 0 → 1, whichever plane asked first; one replica slot ever.
  expect(scalingEvents.filter((e) => e.fromReplicas === 0 && e.toReplicas === 1)).toHaveLength(1);
  expect(new Set(deployment!.instances.map((i) => i.replica))).toEqual(new Set([0]));
  expect(`${a.logs()}${b.logs()}`.match(/cold start: a request is held while a replica loads/g)).toHaveLength(1);
}, 180_000);
