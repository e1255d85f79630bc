// Routing by the queue a node reports, through the real server and the agent's real session: two
// replicas of one deployment on one node, an in-process agent whose heartbeats say requests wait at
// one replica's runtime (sent there by another control plane, say), and sequential invokes. With
// two replicas power of two choices compares both, so every invoke goes to the other replica, and
// follows the queue when it moves. Without the report each invoke is a coin toss.
import { createHash } from "node:crypto";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { MessageInitShape } from "@bufbuild/protobuf";
import type { Client } from "@connectrpc/connect";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { ReplicaLoadSchema } from "../../../gen/proto/modelforge/agent/v1/agent_pb.js";
import type { DeploymentService } from "../../../gen/proto/modelforge/deployment/v1/deployment_pb.js";
import { EngineKind } from "../../../gen/proto/modelforge/jobs/v1/jobs_pb.js";
import type { SessionDeployments } from "../../../agent/deployments/session-hook.js";
import { tinyLlamaGguf } from "../../../scripts/gguf.js";
import { startAgent, type InProcessAgent } from "../../support/agent.js";
import { enrollTestNode, eventually } from "../../support/node.js";
import { scriptedDeploymentAgent } from "../../support/scripted-agent.js";
import { serviceClient } from "../../support/usage-load.js";
import { startTestServer, type TestServer } from "../../support/server.js";
import { deployReady, telemetryArrived } from "../../support/serving.js";

const repository = "acme/queued";
const commit = "e".repeat(40);
const GiB = 2 ** 30;

let ts: TestServer;
let root: string;
let agent: InProcessAgent | undefined;
let client: Client<typeof DeploymentService>;
let deploymentId = "";
/** What the agent's heartbeats report. */
let loads: MessageInitShape<typeof ReplicaLoadSchema>[] = [];

/** The Session side of a node whose runtimes answer every invoke at once. */
const deployments: SessionDeployments = {
  held: () => [],
  loads: () => loads,
  onLost: () => () => undefined,
  onMessage(message, link) {
    if (message.case !== "invoke") return;
    const payload = Buffer.from(JSON.stringify({ object: "text_completion", choices: [{ index: 0, text: "ok" }] }));
    void link.send({
      case: "invokeAnswer",
      value: { invokeId: message.value.invokeId, contentType: "application/json", payload, done: true, revision: 1n },
    });
  },
};

async function invoke(): Promise<number> {
  const payload = Buffer.from(JSON.stringify({ prompt: "x", max_tokens: 1 }));
  return (await client.invoke({ deploymentId: "queued", contentType: "application/json", payload }, { timeoutMs: 30_000 })).replica;
}

/** Requests waiting at replica `slot`'s runtime, as the agent's next heartbeats say. */
const queueAt = (slot: number) => {
  loads = [{ deploymentId, revision: 1n, replica: slot, inFlight: 4, queued: 3 }];
};

/** Twenty invokes in a row answered by `slot`: 2^-20 by chance alone. */
const twentyTo = (slot: number) =>
  eventually(
    async () => {
      for (let k = 0; k < 20; k++) if ((await invoke()) !== slot) return false;
      return true;
    },
    30_000,
    `twenty invokes in a row to replica ${slot}`,
  );

beforeAll(async () => {
  root = mkdtempSync(join(tmpdir(), "mf-queue-routing-"));
  ts = await startTestServer({ MODELFORGE_APPROVED_ROOTS: root, MODELFORGE_HEARTBEAT_INTERVAL: "200ms" });
  const node = await enrollTestNode(ts, "queued");
  const scripted = scriptedDeploymentAgent(4 * GiB);
  agent = await startAgent(node, { ...scripted, deployments });
  await telemetryArrived(ts.admin, node.nodeId);
  await ts.admin.createRuntimeProfile({ name: "tiny-cpu", engine: EngineKind.LLAMA_CPP, contextSize: 1024 });
  const model = tinyLlamaGguf();
  const sha256 = createHash("sha256").update(model.bytes).digest("hex");
  const data = model.bytes;
  await ts.admin.uploadArtifactChunk({ repository, commit, path: "tiny.gguf", sizeBytes: BigInt(data.length), sha256, offset: 0n, data });
  deploymentId = await deployReady(ts.admin, {
    name: "queued",
    nodeId: node.nodeId,
    replicas: 2,
    maxPerNode: 2,
    runtimeProfile: "tiny-cpu",
    repository,
    commit,
    targetRoot: root,
  });
  const secret = (await ts.admin.createServiceKey({ name: "queued", deployments: ["queued"] })).secret;
  client = serviceClient(ts.url, ts.caPem, () => secret);
}, 120_000);

afterAll(async () => {
  await agent?.stop();
  await ts?.stop();
  if (root) rmSync(root, { recursive: true, force: true });
});

describe("routing by the queue the node reports on its heartbeat", () => {
  it("sends every invoke away from the replica with requests queued, and follows the queue when it moves", async () => {
    const idle = new Set<number>();
    for (let k = 0; k < 60 && idle.size < 2; k++) idle.add(await invoke());
    expect([...idle].sort()).toEqual([0, 1]);
    queueAt(0);
    await twentyTo(1);
    queueAt(1);
    await twentyTo(0);
    // The queue drained (a heartbeat listing no replica): both take requests again.
    loads = [];
    await eventually(
      async () => {
        const seen = new Set<number>();
        for (let k = 0; k < 60 && seen.size < 2; k++) seen.add(await invoke());
        return seen.size === 2;
      },
      30_000,
      "both replicas answering again",
    );
  }, 120_000);
});
