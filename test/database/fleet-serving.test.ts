// A deployment served as a fleet, end to end: one control plane, three real agent processes running
// the tiny GGUF under llama.cpp, and a service client. Two replicas land on two nodes and share the
// requests; a replica whose runtime is killed leaves routing at once and is loaded again; an agent
// killed under load has its replica placed on the third node, with only the requests in flight on it
// lost, and its stale runtime stopped when it returns; scaling and a rolling revision under load lose
// no request. Run in the PostgreSQL suite only: what it tests is the controller, the relay and the
// agents (the rules' storage is covered on both backends by test/database/deployments/), and at several
// minutes it is the longest test there is.
import { readFileSync } from "node:fs";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { createClient, type Client, type Interceptor } from "@connectrpc/connect";
import { grpcTransport } from "../../common/http2-sessions.js";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { DeploymentService, DeploymentState } from "../../gen/proto/modelforge/deployment/v1/deployment_pb.js";
import { EngineKind } from "../../gen/proto/modelforge/jobs/v1/jobs_pb.js";
import { writeTinyLlamaGguf } from "../../scripts/gguf.js";
import { forgeAt, type ForgeRun } from "../support/forge.js";
import { testAdminKey } from "../support/server.js";
import { enrollTestNode, eventually, type TestNode } from "../support/node.js";
import { isAlive, type AgentProcess } from "../support/process.js";
import { startTestServer, type TestServer } from "../support/server.js";
import { testBackend } from "../support/db.js";
import { spawnServingAgent, storeArtifact } from "../support/serving.js";

const repository = "acme/tiny";
const commitA = "a".repeat(40);
const commitB = "b".repeat(40);

let ts: TestServer;
let root: string;
let client: Client<typeof DeploymentService>;
let forge: (args: string[]) => Promise<ForgeRun>;
const nodes: TestNode[] = [];
const agents: (AgentProcess | undefined)[] = [];

const record = async () => (await ts.admin.getDeployment({ deployment: "fleet" })).deployment!;
const stateName = (s: DeploymentState) => DeploymentState[s];

/** One short greedy completion; the replica that answered. */
async function invoke(): Promise<number> {
  const payload = Buffer.from(JSON.stringify({ prompt: "The quick brown fox", max_tokens: 2, temperature: 0 }));
  const res = await client.invoke({ deploymentId: "fleet", contentType: "application/json", payload }, { timeoutMs: 60_000 });
  return res.replica;
}

/** Sequential invokes on `lanes` lanes until stopped: each request's start, end and outcome. */
function load(lanes: number) {
  const results: { startedAt: number; endedAt: number; ok: boolean; error?: string }[] = [];
  let running = true;
  const done = Promise.all(
    Array.from({ length: lanes }, async () => {
      while (running) {
        const startedAt = Date.now();
        try {
          await invoke();
          results.push({ startedAt, endedAt: Date.now(), ok: true });
        } catch (err) {
          results.push({ startedAt, endedAt: Date.now(), ok: false, error: String(err) });
        }
      }
    }),
  );
  return {
    results,
    async stop() {
      running = false;
      await done;
      return results;
    },
  };
}

/** Waits until every wanted replica is READY on a node and nothing else runs; the nodes, by replica. */
async function settled(replicas: number, revision?: bigint): Promise<string[]> {
  return eventually(
    async () => {
      const r = await record();
      const current = r.replicas.filter((x) => revision === undefined || x.revision === revision);
      const ready = current.filter((x) => x.state === DeploymentState.READY && x.nodeId !== "");
      if (r.deployment!.state !== DeploymentState.READY || ready.length !== replicas || r.replicas.length !== replicas) return undefined;
      return ready.sort((a, b) => a.index - b.index).map((x) => x.nodeId);
    },
    180_000,
    `the fleet settled at ${replicas} READY replicas`,
  ).catch(async (err: Error) => {
    const shown = (await record()).replicas.map((x) => [x.index, String(x.revision), x.nodeId.slice(0, 8), stateName(x.state), x.reason]);
    throw new Error(`${err.message}: ${JSON.stringify(shown)}`);
  });
}

/** The pid of the runtime process serving the deployment on node `k` (the agent's registry beside its state). */
function runtimePid(k: number): number {
  const registry = JSON.parse(readFileSync(join(dirname(nodes[k]!.statePath), "runtimes.json"), "utf8")) as {
    runtimes: { pid: number }[];
  };
  expect(registry.runtimes).toHaveLength(1);
  return registry.runtimes[0]!.pid;
}

const agentEnv = { MODELFORGE_AGENT_METRICS_ADDRESS: "" };
const skipped = testBackend() !== "postgres";
const indexOf = (nodeId: string) => nodes.findIndex((n) => n.nodeId === nodeId);

beforeAll(async () => {
  if (skipped) return;
  root = mkdtempSync(join(tmpdir(), "mf-fleet-"));
  const model = join(root, "tiny.gguf");
  const { sha256 } = await writeTinyLlamaGguf(model, { contextLength: 1024 });
  ts = await startTestServer({
    MODELFORGE_HEARTBEAT_INTERVAL: "200ms",
    MODELFORGE_LEASE_DURATION: "20s",
    MODELFORGE_APPROVED_ROOTS: root,
    MODELFORGE_REPLACE_AFTER: "1s",
  });
  await ts.admin.createRuntimeProfile({ name: "tiny-cpu", engine: EngineKind.LLAMA_CPP, contextSize: 1024, threads: 1 });
  for (const commit of [commitA, commitB]) await storeArtifact(ts.admin, { repository, commit, path: "tiny.gguf" }, model, sha256);
  for (const name of ["fleet-a", "fleet-b", "fleet-c"]) {
    const node = await enrollTestNode(ts, name);
    await ts.admin.updateNode({ nodeId: node.nodeId, labels: { pool: "fleet" }, updateMask: { paths: ["labels"] } });
    nodes.push(node);
    agents.push(await spawnServingAgent(ts.admin, node, root, agentEnv));
  }
  const secret = (await ts.admin.createServiceKey({ name: "fleet", deployments: ["fleet"] })).secret;
  const bearer: Interceptor = (next) => (req) => {
    req.header.set("authorization", `Bearer ${secret}`);
    return next(req);
  };
  forge = forgeAt(ts.url, ts.caPem, root, testAdminKey);
  client = createClient(DeploymentService, grpcTransport({ baseUrl: ts.url, nodeOptions: { ca: ts.caPem }, interceptors: [bearer] }));
}, 180_000);

afterAll(async () => {
  for (const a of agents) await a?.stop().catch(() => a.kill());
  await ts?.stop();
  if (root) rmSync(root, { recursive: true, force: true });
});

describe.skipIf(skipped)(`a deployment served as a fleet${skipped ? " (PostgreSQL suite only)" : ""}`, () => {
  it("places two replicas on two nodes, READY, and spreads 200 invokes over both", async () => {
    const created = await forge([
      "deployments",
      "create",
      "fleet",
      "--selector",
      "pool=fleet",
      "--replicas",
      "2",
      "--profile",
      "tiny-cpu",
      "--repository",
      repository,
      "--commit",
      commitA,
      "--max-in-flight",
      "4",
    ]);
    expect(created.code, created.stderr).toBe(0);
    const placed = await settled(2);
    expect(new Set(placed).size).toBe(2);
    const got = await forge(["deployments", "get", "fleet", "--json"]);
    const json = JSON.parse(got.stdout) as { deployment: { replicas: { nodeId: string; state: string }[] } };
    expect(json.deployment.replicas.map((r) => [r.nodeId, r.state])).toEqual(placed.map((n) => [n, "DEPLOYMENT_STATE_READY"]));
    const shares = [0, 0];
    for (let k = 0; k < 200; k++) shares[await invoke()]! += 1;
    for (const s of shares) {
      expect(s).toBeGreaterThanOrEqual(60);
      expect(s).toBeLessThanOrEqual(140);
    }
  }, 300_000);

  it("takes a replica whose runtime was killed out of routing at once, and loads it again", async () => {
    const [first] = await settled(2);
    const k = indexOf(first!);
    const pid = runtimePid(k);
    const traffic = load(1);
    const killedAt = Date.now();
    process.kill(pid, "SIGKILL");
    // Never READY while the replica is dead: DEGRADED until it is loaded again.
    const seen: string[] = [];
    await eventually(
      async () => {
        const r = await record();
        seen.push(stateName(r.deployment!.state));
        return r.deployment!.state === DeploymentState.DEGRADED;
      },
      10_000,
      "the deployment DEGRADED after its runtime died",
    );
    const degradedAfterMs = Date.now() - killedAt;
    await eventually(
      async () => {
        const r = await record();
        const state = r.deployment!.state;
        seen.push(stateName(state));
        return state === DeploymentState.READY && r.replicas.every((x) => x.state === DeploymentState.READY) ? true : undefined;
      },
      60_000,
      "the replica loaded again and the deployment READY",
    );
    const results = await traffic.stop();
    expect(degradedAfterMs).toBeLessThan(5_000);
    // Reloaded on its own node: a new runtime there.
    expect((await record()).replicas.map((x) => x.nodeId)).toContain(first);
    expect(runtimePid(k)).not.toBe(pid);
    // At most the one request in flight on the dead runtime failed; the rest went to the other replica.
    const failed = results.filter((r) => !r.ok);
    expect(failed.length, JSON.stringify(failed)).toBeLessThanOrEqual(1);
    expect(failed.every((r) => r.startedAt <= killedAt + 50)).toBe(true);
    expect(seen.indexOf("DEGRADED")).toBeLessThan(seen.lastIndexOf("READY"));
  }, 180_000);

  it("re-places the replica of an agent killed under load on the third node; only requests in flight there fail", async () => {
    const placed = await settled(2);
    const victim = indexOf(placed[0]!);
    const third = nodes.findIndex((n) => !placed.includes(n.nodeId));
    const stalePid = runtimePid(victim);
    const traffic = load(2);
    await eventually(() => traffic.results.length >= 10, 60_000, "load running");
    const killedAt = Date.now();
    const killed = agents[victim]!.kill();
    agents[victim] = undefined;
    await killed;
    const now = await eventually(
      async () => {
        const r = await record();
        const on = r.replicas.filter((x) => x.state === DeploymentState.READY).map((x) => x.nodeId);
        return r.deployment!.state === DeploymentState.READY && on.includes(nodes[third]!.nodeId) ? on : undefined;
      },
      120_000,
      "a replacement READY on the third node",
    );
    const results = await traffic.stop();
    expect(now).not.toContain(nodes[victim]!.nodeId);
    // Only requests that began before the kill (in flight on the dead replica) failed, at most one a lane;
    // routing went round the dead node from the moment its session closed.
    const failed = results.filter((r) => !r.ok);
    expect(failed.length, JSON.stringify(failed)).toBeLessThanOrEqual(2);
    for (const f of failed) expect(f.startedAt).toBeLessThanOrEqual(killedAt);
    expect(results.filter((r) => r.startedAt > killedAt + 1_000).every((r) => r.ok)).toBe(true);
    // The agent comes back: its old runtime (an orphan of the killed agent) is stopped, and the
    // deployment keeps its replicas where they are now.
    const back = await spawnServingAgent(ts.admin, nodes[victim]!, root, agentEnv);
    agents[victim] = back;
    await eventually(
      async () => (await ts.admin.getNode({ nodeId: nodes[victim]!.nodeId })).node!.connected,
      60_000,
      "the killed node's agent connected again",
    ).catch((err: Error) => {
      throw new Error(`${err.message}; its output:\n${back.output().slice(-3000)}`);
    });
    await eventually(() => !isAlive(stalePid), 60_000, "the stale runtime stopped once its agent returned");
    expect((await settled(2)).sort()).toEqual([...now].sort());
    const audit = await ts.admin.listAuditEvents({ action: "deployment.replica_unplaced", pageSize: 100 });
    expect(audit.events.some((e) => e.details.nodeId === nodes[victim]!.nodeId)).toBe(true);
  }, 300_000);

  it("scales 2 -> 3 -> 1 under load with no failed invoke", async () => {
    await settled(2);
    const traffic = load(2);
    await eventually(() => traffic.results.length >= 5, 60_000, "load running");
    expect((await forge(["deployments", "scale", "fleet", "--replicas", "3"])).code).toBe(0);
    expect(new Set(await settled(3)).size).toBe(3);
    expect((await forge(["deployments", "scale", "fleet", "--replicas", "1"])).code).toBe(0);
    await settled(1);
    const results = await traffic.stop();
    expect(results.filter((r) => !r.ok)).toEqual([]);
    expect(results.length).toBeGreaterThan(10);
  }, 300_000);

  it("rolls a new revision over two replicas under load with no failed invoke", async () => {
    await ts.admin.scaleDeployment({ deployment: "fleet", replicas: 2 });
    await settled(2);
    const traffic = load(2);
    await eventually(() => traffic.results.length >= 5, 60_000, "load running");
    const moved = await forge(["deployments", "revision", "fleet", "--commit", commitB]);
    expect(moved.code, moved.stderr).toBe(0);
    const placed = await settled(2, 2n);
    const results = await traffic.stop();
    expect(new Set(placed).size).toBe(2);
    expect(results.filter((r) => !r.ok)).toEqual([]);
    // Surge one: never more than three replicas loaded at once.
    const events = (await ts.admin.getDeployment({ deployment: "fleet" })).events.filter((e) => e.revision === 2n);
    expect(events.filter((e) => e.toState === DeploymentState.READY)).toHaveLength(2);
  }, 300_000);
});
