// Two replicas of one deployment on one node (max_per_node 2), through the real server and one real
// agent process running the tiny GGUF: each replica is a runtime process of its own, invokes are
// answered by both, and kill -9 of one runtime leaves the other serving while the first is loaded
// again. Runs on either backend.
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import type { Client } from "@connectrpc/connect";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type DeploymentService, DeploymentState } from "../../../gen/proto/modelforge/deployment/v1/deployment_pb.js";
import { writeTinyLlamaGguf } from "../../../scripts/gguf.js";
import { eventually, type TestNode } from "../../support/node.js";
import { isAlive, type AgentProcess } from "../../support/process.js";
import { serviceClient } from "../../support/usage-load.js";
import { startTestServer, type TestServer } from "../../support/server.js";
import { deployReady, servingNode, storeArtifact } from "../../support/serving.js";

const repository = "acme/tiny";
const commit = "d".repeat(40);

let ts: TestServer;
let root: string;
let node: TestNode;
let agent: AgentProcess | undefined;
let client: Client<typeof DeploymentService>;

const record = async () => (await ts.admin.getDeployment({ deployment: "pair" })).deployment!;

/** One short greedy completion; the replica slot that answered. */
async function invoke(): Promise<number> {
  const payload = Buffer.from(JSON.stringify({ prompt: "The quick brown fox", max_tokens: 2, temperature: 0 }));
  const res = await client.invoke({ deploymentId: "pair", contentType: "application/json", payload }, { timeoutMs: 60_000 });
  return res.replica;
}

/** The runtime processes the agent has running (its registry beside its state). */
function runtimePids(): number[] {
  const registry = JSON.parse(readFileSync(join(dirname(node.statePath), "runtimes.json"), "utf8")) as { runtimes: { pid: number }[] };
  return registry.runtimes.map((r) => r.pid).sort((a, b) => a - b);
}

beforeAll(async () => {
  root = mkdtempSync(join(tmpdir(), "mf-per-node-"));
  const model = join(root, "tiny.gguf");
  const { sha256 } = await writeTinyLlamaGguf(model, { contextLength: 1024 });
  ts = await startTestServer({ MODELFORGE_HEARTBEAT_INTERVAL: "200ms", MODELFORGE_APPROVED_ROOTS: root });
  ({ node, agent } = await servingNode(ts, root, "pair-node", 1024));
  await storeArtifact(ts.admin, { repository, commit, path: "tiny.gguf" }, model, sha256);
  const secret = (await ts.admin.createServiceKey({ name: "pair", deployments: ["pair"] })).secret;
  client = serviceClient(ts.url, ts.caPem, () => secret);
}, 180_000);

afterAll(async () => {
  await agent?.stop().catch(() => agent?.kill());
  await ts?.stop();
  if (root) rmSync(root, { recursive: true, force: true });
});

describe("two replicas on one node (max_per_node 2)", () => {
  it("runs a runtime process per replica, READY, and both answer invokes", async () => {
    await deployReady(ts.admin, {
      name: "pair",
      nodeId: node.nodeId,
      replicas: 2,
      maxPerNode: 2,
      runtimeProfile: "tiny-cpu",
      repository,
      commit,
      targetRoot: root,
      maxInFlight: 4,
    });
    const r = await record();
    expect(r.replicas.map((x) => [x.index, x.nodeId, x.state])).toEqual([
      [0, node.nodeId, DeploymentState.READY],
      [1, node.nodeId, DeploymentState.READY],
    ]);
    const pids = runtimePids();
    expect(pids).toHaveLength(2);
    expect(new Set(pids).size).toBe(2);
    expect(pids.every(isAlive)).toBe(true);
    // Equal loads: each pick is a coin toss between the two, so 60 invokes miss one with odds 2^-59.
    const answered = new Set<number>();
    for (let k = 0; k < 60 && answered.size < 2; k++) answered.add(await invoke());
    expect([...answered].sort()).toEqual([0, 1]);
  }, 240_000);

  it("kill -9 of one runtime leaves the other serving while the first is loaded again", async () => {
    const [killed, survivor] = runtimePids() as [number, number];
    process.kill(killed, "SIGKILL");
    // The agent reports the lost runtime at once: its replica leaves routing and is loaded again.
    const { index: slot } = await eventually(
      async () => (await record()).replicas.find((x) => x.state !== DeploymentState.READY),
      30_000,
      "the killed runtime's replica out of READY",
    );
    const served: number[] = [];
    let failed = 0;
    await eventually(
      async () => {
        const r = await record();
        if (r.deployment!.state === DeploymentState.READY && r.replicas.every((x) => x.state === DeploymentState.READY)) return true;
        // Meanwhile every invoke is answered (refused by the node first at most, then moved). Four
        // at once (the bound): while the killed replica reloads they all go to the survivor, and
        // once it is back the less loaded of the two takes each, so the survivor serves some even
        // when the reload is quicker than one round of this loop.
        await Promise.all(
          Array.from({ length: 4 }, () =>
            invoke().then(
              (replica) => served.push(replica),
              () => (failed += 1),
            ),
          ),
        );
        return undefined;
      },
      120_000,
      "the killed replica READY again",
    );
    expect(failed).toBe(0);
    expect(served.length).toBeGreaterThan(0);
    expect(served).toContain(1 - slot);
    // The survivor's runtime was never touched; the killed one has a successor.
    expect(isAlive(survivor)).toBe(true);
    const now = runtimePids();
    expect(now).toHaveLength(2);
    expect(now).toContain(survivor);
    expect(now).not.toContain(killed);
    const answered = new Set<number>();
    for (let k = 0; k < 60 && answered.size < 2; k++) answered.add(await invoke());
    expect([...answered].sort()).toEqual([0, 1]);
  }, 240_000);

  it("scaling to 1 drains and unloads replica 1's runtime only; replica 0's serves throughout", async () => {
    const before = runtimePids();
    const leftReady = async () =>
      (await ts.admin.getDeployment({ deployment: "pair" })).events.filter((e) => e.replica === 0 && e.fromState === DeploymentState.READY)
        .length;
    const leftBefore = await leftReady();
    await ts.admin.scaleDeployment({ deployment: "pair", replicas: 1 });
    const served: number[] = [];
    let failed = 0;
    await eventually(
      async () => {
        await invoke().then(
          (replica) => served.push(replica),
          () => (failed += 1),
        );
        const r = await record();
        return r.replicas.length === 1 && r.replicas[0]!.state === DeploymentState.READY && runtimePids().length === 1;
      },
      120_000,
      "one replica left, one runtime",
    );
    expect(failed).toBe(0);
    const [kept] = runtimePids();
    expect(before).toContain(kept);
    expect(isAlive(kept!)).toBe(true);
    for (let k = 0; k < 5; k++) expect(await invoke()).toBe(0);
    // Replica 0 never left READY: the same runtime, and no new step in its history.
    expect(await leftReady()).toBe(leftBefore);
  }, 240_000);
});
