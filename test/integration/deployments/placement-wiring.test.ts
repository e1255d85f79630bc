// Placement through the real server: two agents over mTLS whose telemetry the test sets, a real
// GGUF pushed (its memory estimated at push), and deployments created by selector and by node. A
// model too large for one node's memory lands on the other; what fits nowhere waits PENDING with
// the numbers, counting what placed deployments already hold, and is placed when a node that fits
// joins.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createHash } from "node:crypto";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { EngineKind } from "../../../gen/proto/modelforge/jobs/v1/jobs_pb.js";
import { startTestServer, type TestServer } from "../../support/server.js";
import { enrollTestNode, type TestNode } from "../../support/node.js";
import { scriptedDeploymentAgent } from "../../support/scripted-agent.js";
import { startAgent, type InProcessAgent } from "../../support/agent.js";
import { telemetryArrived } from "../../support/serving.js";
import { eventually } from "../../support/node.js";
import { DeploymentState } from "../../../gen/proto/modelforge/deployment/v1/deployment_pb.js";
import { tinyLlamaGguf } from "../../../scripts/gguf.js";
import { memoryNeed } from "../../../server/artifacts/memory.js";
import { size } from "../../../server/deployments/placement.js";

const MiB = 2 ** 20;
const GiB = 2 ** 30;
const repository = "acme/placed";
const commit = "c".repeat(40);
const model = tinyLlamaGguf();
// The tiny model's header: f32 weights, 512 B of KV cache a token, trained at 1024 tokens.
const estimate = {
  weightsBytes: (2 * 64 * 99 + 64 + 2 * (64 + 4 * 64 * 64 + 64 + 3 * 64 * 128)) * 4,
  kvBytesPerToken: 512,
  contextLength: 1024,
};

/** What the openai-http profile "remote" declares its server takes on the node. */
const remoteBytes = 64 * MiB;

let ts: TestServer;
let root: string;
const nodes: { [name: string]: TestNode } = {};
const agents: InProcessAgent[] = [];

beforeAll(async () => {
  root = mkdtempSync(join(tmpdir(), "mf-placement-root-"));
  ts = await startTestServer({ MODELFORGE_APPROVED_ROOTS: root, MODELFORGE_HEARTBEAT_INTERVAL: "200ms", MODELFORGE_REPLACE_AFTER: "1s" });
  for (const [name, available] of [
    ["small", 100 * MiB],
    ["big", 1 * GiB],
  ] as const) {
    const node = await enrollTestNode(ts, name);
    nodes[name] = node;
    await ts.admin.updateNode({ nodeId: node.nodeId, labels: { pool: "cpu" }, updateMask: { paths: ["labels"] } });
    agents.push(await startAgent(node, scriptedDeploymentAgent(available)));
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

/**
 * The deployment, once its one replica is PENDING: that replica's reason. The deployment's own
 * reason follows its replica's at the controller's next pass, so it is waited for.
 */
async function pendingReason(name: string): Promise<string> {
  const read = async () => (await ts.admin.getDeployment({ deployment: name })).deployment!;
  await eventually(
    async () => {
      const r = await read();
      return r.replicas.length === 1 && r.deployment!.failureReason === r.replicas[0]!.reason;
    },
    30_000,
    `${name}'s reason the same as its replica's`,
  );
  const r = await read();
  expect(r.deployment!.state).toBe(DeploymentState.PENDING);
  expect(r.replicas).toHaveLength(1);
  expect(r.replicas[0]!.state).toBe(DeploymentState.PENDING);
  expect(r.replicas[0]!.nodeId).toBe("");
  expect(r.deployment!.failureReason).toBe(r.replicas[0]!.reason);
  return r.replicas[0]!.reason;
}

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

  it("leaves a replica pinned to a node that does not fit PENDING, with its numbers", async () => {
    const small = nodes.small!.nodeId;
    await deploy("pinned", { nodeId: small });
    expect(await pendingReason("pinned")).toBe(`no node fits: node ${small}: has ${size(100 * MiB)} of memory free, needs ${size(need1k)}`);
  });

  it("prices the KV cache of every sequence a profile's parallel asks for", async () => {
    const small = nodes.small!.nodeId;
    await ts.admin.createRuntimeProfile({ name: "ctx-1k-x8", engine: EngineKind.LLAMA_CPP, contextSize: 1024, parallel: 8 });
    const need8 = memoryNeed(estimate, 1024, 8);
    expect(need8 - need1k).toBeGreaterThanOrEqual(7 * 1024 * estimate.kvBytesPerToken);
    await deploy("pinned-x8", { nodeId: small, runtimeProfile: "ctx-1k-x8" });
    expect(await pendingReason("pinned-x8")).toBe(
      `no node fits: node ${small}: has ${size(100 * MiB)} of memory free, needs ${size(need8)}`,
    );
  });

  it("counts what placed deployments hold: fits nowhere, and says why with the numbers", async () => {
    const need1m = memoryNeed(estimate, 1_048_576);
    // Alone, the big node would hold it; with "first" and "remote" placed there, it does not.
    const bigFree = GiB - need1k - remoteBytes;
    expect(need1m).toBeLessThan(GiB);
    expect(need1m).toBeGreaterThan(bigFree);
    await deploy("long", { runtimeProfile: "ctx-1m" });
    expect(await pendingReason("long")).toBe(
      `no node fits: 2 online; 2 have ${size(100 * MiB)} and ${size(bigFree)} of memory free, needs ${size(need1m)}`,
    );
  });

  it("fits an openai-http profile by the memory it declares", async () => {
    await deploy("remote-big", { runtimeProfile: "remote-2g" });
    expect(await pendingReason("remote-big")).toBe(
      `no node fits: 2 online; 2 have ${size(100 * MiB)} and ${size(GiB - need1k - remoteBytes)} of memory free, needs 2.0 GiB`,
    );
    const small = await deploy("remote-small", { runtimeProfile: "remote" });
    expect(small.deployment!.replicas[0]!.nodeId).toBe(nodes.small!.nodeId);
  });

  it("places what waited when a node that fits joins, and audits the placement", async () => {
    const node = await enrollTestNode(ts, "huge");
    await ts.admin.updateNode({ nodeId: node.nodeId, labels: { pool: "cpu" }, updateMask: { paths: ["labels"] } });
    agents.push(await startAgent(node, scriptedDeploymentAgent(8 * GiB)));
    for (const name of ["long", "remote-big"]) {
      await eventually(
        async () => (await ts.admin.getDeployment({ deployment: name })).deployment!.deployment!.state === DeploymentState.READY,
        60_000,
        `${name} placed on the new node and READY`,
      );
      const r = (await ts.admin.getDeployment({ deployment: name })).deployment!;
      expect(r.replicas[0]!.nodeId).toBe(node.nodeId);
    }
    // The one pinned to the small node still waits there.
    expect((await ts.admin.getDeployment({ deployment: "pinned" })).deployment!.deployment!.state).toBe(DeploymentState.PENDING);
    const audit = await ts.admin.listAuditEvents({ action: "deployment.replica_placed", pageSize: 100 });
    expect(audit.events.length).toBeGreaterThanOrEqual(4);
  }, 150_000);

  it("moves replicas off a node whose session closed, and never places them back on it", async () => {
    const huge = agents.pop()!;
    await huge.stop();
    for (const name of ["long", "remote-big"]) {
      await eventually(
        async () => {
          const r = (await ts.admin.getDeployment({ deployment: name })).deployment!;
          // Unplaced first ("session closed: placing it again"), then refused by the placement pass.
          return r.deployment!.state === DeploymentState.PENDING && r.replicas[0]?.reason.startsWith("no node fits");
        },
        60_000,
        `${name} PENDING, and no node fits, once its node's session closed`,
      );
      // Nothing else fits, and the node that left is not a candidate: it is counted out, not chosen.
      expect(await pendingReason(name)).toMatch(/^no node fits: 2 online; 1 is offline, disabled or decommissioned; /);
    }
    const moved = await ts.admin.listAuditEvents({ action: "deployment.replica_unplaced", pageSize: 100 });
    expect(moved.events.length).toBe(2);
  }, 120_000);
});
