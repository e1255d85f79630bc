// Placement through the real server: two agents over mTLS whose telemetry the test sets, a real
// GGUF pushed (its memory estimated at push), and deployments created by selector and by node. A
// model too large for one node's memory lands on the other; what fits nowhere is refused with the
// numbers, counting what placed deployments already hold.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createHash } from "node:crypto";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { create } from "@bufbuild/protobuf";
import { Code } from "@connectrpc/connect";
import { TelemetrySchema } from "../../gen/proto/modelforge/common/v1/common_pb.js";
import { EngineKind, type JobSpec } from "../../gen/proto/modelforge/jobs/v1/jobs_pb.js";
import { CapabilityRegistry } from "../../agent/jobs/index.js";
import { collectInventory } from "../../agent/collectors/inventory.js";
import { startTestServer, type TestServer } from "../support/server.js";
import { enrollTestNode, type TestNode } from "../support/node.js";
import { startAgent, type InProcessAgent } from "../support/agent.js";
import { telemetryArrived } from "../support/serving.js";
import { tinyLlamaGguf } from "../../scripts/gguf.js";
import { memoryNeed } from "../../server/artifacts/memory.js";
import { size } from "../../server/deployments/placement.js";

const MiB = 2 ** 20;
const GiB = 2 ** 30;
const repository = "acme/placed";
const commit = "c".repeat(40);
const model = tinyLlamaGguf();
// The tiny model's header: f32 weights, 512 B of KV cache a token, trained at 1024 tokens.
const estimate = {
  weightsBytes: (2 * 64 * 354 + 64 + 2 * (64 + 4 * 64 * 64 + 64 + 3 * 64 * 128)) * 4,
  kvBytesPerToken: 512,
  contextLength: 1024,
};

/** What the openai-http profile "remote" declares its server takes on the node. */
const remoteBytes = 64 * MiB;

let ts: TestServer;
let root: string;
const nodes: { [name: string]: TestNode } = {};
const agents: InProcessAgent[] = [];

/** An agent whose deployment steps succeed at once and whose telemetry says `availableBytes` of RAM. */
function agentReporting(availableBytes: number) {
  const registry = new CapabilityRegistry();
  registry.engines = ["llama.cpp", "openai-http"];
  registry
    .register("artifact.acquire.v1", async (spec: JobSpec) => {
      if (spec.kind.case !== "artifactAcquire") throw new Error("wrong spec");
      const v = spec.kind.value;
      return { result: { case: "artifactAcquire", value: { path: join(v.targetRoot, "m"), files: v.files, bytesWritten: 0n } } };
    })
    .register("deployment.load.v1", async (spec: JobSpec) => {
      if (spec.kind.case !== "deploymentLoad") throw new Error("wrong spec");
      return { result: { case: "deploymentLoad", value: { runtimeId: "rt", revision: spec.kind.value.revision } } };
    })
    .register("deployment.drain.v1", async () => ({ result: { case: "deploymentDrain", value: { completedInFlight: 0 } } }))
    .register("deployment.unload.v1", async () => ({ result: { case: "deploymentUnload", value: { freedBytes: 0n } } }));
  const total = 32 * GiB;
  const telemetry = create(TelemetrySchema, {
    memoryTotalBytes: BigInt(total),
    memoryUsedBytes: BigInt(total - availableBytes),
    mounts: [{ mount: "/", sizeBytes: BigInt(500 * GiB), usedBytes: BigInt(100 * GiB) }],
  });
  return { registry, reporters: { inventory: () => collectInventory(), telemetry: async () => telemetry } };
}

beforeAll(async () => {
  root = mkdtempSync(join(tmpdir(), "mf-placement-root-"));
  ts = await startTestServer({ MODELFORGE_APPROVED_ROOTS: root, MODELFORGE_HEARTBEAT_INTERVAL: "200ms" });
  for (const [name, available] of [
    ["small", 100 * MiB],
    ["big", 1 * GiB],
  ] as const) {
    const node = await enrollTestNode(ts, name);
    nodes[name] = node;
    await ts.admin.updateNode({ nodeId: node.nodeId, labels: { pool: "cpu" }, updateMask: { paths: ["labels"] } });
    agents.push(await startAgent(node, agentReporting(available)));
    await telemetryArrived(ts.admin, node.nodeId);
  }
  await ts.admin.createRuntimeProfile({ name: "ctx-1k", engine: EngineKind.LLAMA_CPP, contextSize: 1024 });
  await ts.admin.createRuntimeProfile({ name: "ctx-1m", engine: EngineKind.LLAMA_CPP, contextSize: 1_048_576 });
  await ts.admin.createRuntimeProfile({ name: "remote", engine: EngineKind.OPENAI_HTTP, memoryBytes: BigInt(remoteBytes) });
  await ts.admin.createRuntimeProfile({ name: "remote-2g", engine: EngineKind.OPENAI_HTTP, memoryBytes: BigInt(2 * GiB) });
  const sha256 = createHash("sha256").update(model.bytes).digest("hex");
  const data = model.bytes;
  await ts.admin.uploadArtifactChunk({ repository, commit, path: "tiny.gguf", sizeBytes: BigInt(data.length), sha256, offset: 0n, data });
}, 120_000);

afterAll(async () => {
  for (const a of agents) await a.stop();
  await ts?.stop();
  if (root) rmSync(root, { recursive: true, force: true });
});

const deploy = (name: string, over: { nodeId?: string; runtimeProfile?: string } = {}) =>
  ts.admin.createDeployment({
    name,
    selector: over.nodeId === undefined ? { pool: "cpu" } : {},
    nodeId: over.nodeId ?? "",
    runtimeProfile: over.runtimeProfile ?? "ctx-1k",
    repository,
    commit,
    targetRoot: root,
  });

describe("placement through the real server", () => {
  const need1k = memoryNeed(estimate, 1024);

  it("puts a model too large for one node's memory on the other", async () => {
    expect(need1k).toBeGreaterThan(100 * MiB);
    // An openai-http deployment (declaring 64 MiB) makes the big node the more loaded one, so only
    // the memory fit sends the next deployment there.
    const remote = await deploy("remote", { nodeId: nodes.big!.nodeId, runtimeProfile: "remote" });
    expect(remote.deployment!.deployment!.nodeId).toBe(nodes.big!.nodeId);
    const created = await deploy("first");
    expect(created.deployment!.deployment!.nodeId).toBe(nodes.big!.nodeId);
  });

  it("refuses a named node that does not fit, with its numbers", async () => {
    const small = nodes.small!.nodeId;
    await expect(deploy("pinned", { nodeId: small })).rejects.toMatchObject({
      code: Code.FailedPrecondition,
      rawMessage: `no node fits: node ${small}: has ${size(100 * MiB)} of memory free, needs ${size(need1k)}`,
    });
  });

  it("counts what placed deployments hold: fits nowhere, and says why with the numbers", async () => {
    const need1m = memoryNeed(estimate, 1_048_576);
    // Alone, the big node would hold it; with "first" and "remote" placed there, it does not.
    const bigFree = GiB - need1k - remoteBytes;
    expect(need1m).toBeLessThan(GiB);
    expect(need1m).toBeGreaterThan(bigFree);
    await expect(deploy("long", { runtimeProfile: "ctx-1m" })).rejects.toMatchObject({
      code: Code.FailedPrecondition,
      rawMessage: `no node fits: 2 online; 2 have ${size(100 * MiB)} and ${size(bigFree)} of memory free, needs ${size(need1m)}`,
    });
  });

  it("fits an openai-http profile by the memory it declares", async () => {
    await expect(deploy("remote-big", { runtimeProfile: "remote-2g" })).rejects.toMatchObject({
      code: Code.FailedPrecondition,
      rawMessage: `no node fits: 2 online; 2 have ${size(100 * MiB)} and ${size(GiB - need1k - remoteBytes)} of memory free, needs 2.0 GiB`,
    });
    const small = await deploy("remote-small", { runtimeProfile: "remote" });
    expect(small.deployment!.deployment!.nodeId).toBe(nodes.small!.nodeId);
  });
});
