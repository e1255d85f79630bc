// Rollouts through the real TLS server and real Sessions, on an injected clock: nodes (scripted
// agents speaking the real protocol) are told to update batch by batch with a typed instruction,
// download the release over mTLS, come back on the new version; a node that reports a rolled
// back update pauses the rollout with its reason; abort leaves every node where it is; version
// limits refuse a rollout up front. (The agent's own side is test/integration/agents-update.test.ts.)
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createHash } from "node:crypto";
import { create } from "@bufbuild/protobuf";
import { timestampFromMs } from "@bufbuild/protobuf/wkt";
import { Code, ConnectError } from "@connectrpc/connect";
import { ManualClock } from "../../common/clock.js";
import { releaseArtifact } from "../../common/agent-releases.js";
import type { SessionRequest } from "../../gen/proto/modelforge/agent/v1/agent_pb.js";
import { AgentUpdateReportSchema, type AgentUpdateInstruction } from "../../gen/proto/modelforge/agent/v1/agent_update_pb.js";
import { RolloutNodeState, RolloutState } from "../../gen/proto/modelforge/admin/v1/agent_upgrades_pb.js";
import { durationFromMs } from "@bufbuild/protobuf/wkt";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { startTestServer, testAdminKey, type TestServer } from "../support/server.js";
import { forgeAt } from "../support/forge.js";
import { enrollTestNode, eventually, type TestNode } from "../support/node.js";
import { AsyncQueue } from "../../common/queue.js";

const clock = new ManualClock();
let ts: TestServer;

/** An agent written by hand: a Session with a chosen version and update report, recording the instructions it is sent. */
class ScriptedAgent {
  readonly instructions: AgentUpdateInstruction[] = [];
  private outbound: AsyncQueue<SessionRequest> | undefined;
  private sequence = 0n;
  constructor(
    readonly name: string,
    readonly node: TestNode,
  ) {}

  async connect(
    agentVersion: string,
    lastUpdate?: { rolloutId: string; version: string; succeeded: boolean; reason: string },
  ): Promise<void> {
    this.disconnect();
    const outbound = new AsyncQueue<SessionRequest>();
    this.outbound = outbound;
    const hello = { protocolVersion: 1, agentVersion, ...(lastUpdate ? { lastUpdate: create(AgentUpdateReportSchema, lastUpdate) } : {}) };
    outbound.push({ messageId: 1n, message: { case: "hello", value: hello } } as SessionRequest);
    this.sequence += 1n;
    const report = { sequence: this.sequence, observedAt: timestampFromMs(clock.now()), host: { architecture: "x64" } };
    outbound.push({ messageId: 2n, message: { case: "inventory", value: { report } } } as SessionRequest);
    const client = await this.node.client();
    let welcomed!: () => void;
    const welcome = new Promise<void>((resolve) => (welcomed = resolve));
    void (async () => {
      for await (const res of client.session(outbound)) {
        if (res.message.case === "welcome") welcomed();
        if (res.message.case === "instruction" && res.message.value.kind.case === "agentUpdate")
          this.instructions.push(res.message.value.kind.value);
      }
    })().catch(() => undefined);
    await welcome;
  }

  disconnect(): void {
    this.outbound?.end();
    this.outbound = undefined;
  }
}

const release = Buffer.from("#!/usr/bin/env node\n// agent 0.2.0\n");
const sha256 = createHash("sha256").update(release).digest("hex");
let agents: ScriptedAgent[];

async function push(version: string, content: Buffer): Promise<void> {
  const sha = createHash("sha256").update(content).digest("hex");
  const name = releaseArtifact(sha, { version, platform: "linux-x64" });
  await ts.admin.uploadArtifactChunk({ ...name, sha256: sha, sizeBytes: BigInt(content.length), offset: 0n, data: content });
  await ts.admin.createAgentRelease({ version, platform: "linux-x64", sha256: sha, sizeBytes: BigInt(content.length) });
}

const rollout = async (id: string) => (await ts.admin.getAgentRollout({ rolloutId: id })).rollout!;
const stateOf = async (id: string) => Object.fromEntries((await rollout(id)).nodes.map((n) => [n.nodeName, RolloutNodeState[n.state]]));
const codeOf = (p: Promise<unknown>) =>
  p.then(
    () => undefined,
    (e: unknown) => ConnectError.from(e).code,
  );

beforeAll(async () => {
  ts = await startTestServer({ MODELFORGE_MIN_AGENT_VERSION: "0.1.0" }, { clock });
  agents = [];
  for (const name of ["a", "b", "c"]) {
    const node = await enrollTestNode(ts, name);
    await ts.admin.updateNode({ nodeId: node.nodeId, labels: { pool: "p1" }, updateMask: { paths: ["labels"] } });
    agents.push(new ScriptedAgent(name, node));
  }
  for (const a of agents) await a.connect("0.1.0");
  await push("0.2.0", release);
  // Inventories are applied after Welcome: wait until the platform is known for all three.
  await eventually(async () => (await ts.admin.listNodes({})).nodes.every((n) => n.host?.architecture === "x64"), 20_000, "inventories");
}, 90_000);
afterAll(async () => {
  for (const a of agents ?? []) a.disconnect();
  await ts?.stop();
});

describe("a rollout", () => {
  let id: string;

  it("updates the first batch with a typed instruction, and serves it the release", async () => {
    const created = await ts.admin.createAgentRollout({
      version: "0.2.0",
      selector: { pool: "p1" },
      batchPercent: 50,
      pauseBetween: durationFromMs(30_000),
    });
    id = created.rollout!.id;
    expect(created.rollout).toMatchObject({ state: RolloutState.RUNNING, batches: 2, counts: { pending: 3 } });
    // One round marks the batch's nodes, the next delivers to them (the loops' order is not promised).
    await clock.tick(100);
    await clock.tick(100);
    const [a, b, c] = agents as [ScriptedAgent, ScriptedAgent, ScriptedAgent];
    await eventually(() => a.instructions.length > 0 && b.instructions.length > 0, 20_000, "instructions to batch 1");
    expect(a.instructions[0]).toMatchObject({
      rolloutId: id,
      version: "0.2.0",
      platform: "linux-x64",
      sha256,
      sizeBytes: BigInt(release.length),
    });
    expect(c.instructions).toEqual([]);
    expect(await stateOf(id)).toEqual({ a: "UPDATING", b: "UPDATING", c: "PENDING" });
    const client = await a.node.client();
    const chunks: Uint8Array[] = [];
    for await (const res of client.downloadAgentRelease({ version: "0.2.0", platform: "linux-x64", offset: 5n })) chunks.push(res.data);
    expect(Buffer.concat(chunks)).toEqual(release.subarray(5));
    // c is not in the batch under way: it may not download yet.
    const cClient = await c.node.client();
    const early = async () => {
      for await (const _ of cClient.downloadAgentRelease({ version: "0.2.0", platform: "linux-x64" })) return;
    };
    expect(await codeOf(early())).toBe(Code.PermissionDenied);
  });

  it("counts a batch healthy when its nodes are back on the version, then waits out the window before the next", async () => {
    const [a, b, c] = agents as [ScriptedAgent, ScriptedAgent, ScriptedAgent];
    await a.connect("0.2.0", { rolloutId: id, version: "0.2.0", succeeded: true, reason: "" });
    await b.connect("0.2.0");
    await clock.tick(100);
    await eventually(async () => (await rollout(id)).counts?.updated === 2, 20_000, "batch 1 updated");
    await clock.tick(100);
    await clock.tick(20_000);
    expect((await rollout(id)).currentBatch).toBe(0);
    expect(c.instructions).toEqual([]);
    await clock.tick(10_000);
    await clock.tick(100);
    await clock.tick(100);
    await eventually(() => c.instructions.length > 0, 20_000, "the instruction to batch 2");
    expect((await rollout(id)).currentBatch).toBe(1);
  });

  it("pauses itself when a node reports its update rolled back, with the reason", async () => {
    const c = agents[2]!;
    const reason = "rolled back: 0.2.0 did not reach a healthy session within 2m";
    await c.connect("0.1.0", { rolloutId: id, version: "0.2.0", succeeded: false, reason });
    await eventually(
      async () => (await ts.admin.listAuditEvents({ action: "agent.update.failed" })).events.length === 1,
      20_000,
      "the report",
    );
    await clock.tick(100);
    const paused = await eventually(
      async () => {
        const r = await rollout(id);
        return r.state === RolloutState.PAUSED ? r : undefined;
      },
      20_000,
      "the pause",
    );
    expect(paused.pausedReason).toBe(`batch 2 of 2 failed: c: ${reason}`);
    expect(paused.counts).toMatchObject({ updated: 2, failed: 1, pending: 0 });
    const actions = (await ts.admin.listAuditEvents({ pageSize: 1000 })).events.map((e) => e.action);
    for (const action of [
      "agent.rollout.created",
      "agent.update.updating",
      "agent.update.updated",
      "agent.rollout.batch-healthy",
      "agent.rollout.paused",
    ]) {
      expect(actions).toContain(action);
    }
  });

  it("aborts for good: updated nodes stay on the new version, the rest on theirs", async () => {
    const aborted = (await ts.admin.abortAgentRollout({ rolloutId: id, reason: "bad release" })).rollout!;
    expect(aborted.state).toBe(RolloutState.ABORTED);
    expect(await codeOf(ts.admin.resumeAgentRollout({ rolloutId: id }))).toBe(Code.FailedPrecondition);
    const versions = Object.fromEntries((await ts.admin.listNodes({})).nodes.map((n) => [n.name, n.agentVersion]));
    expect(versions).toEqual({ a: "0.2.0", b: "0.2.0", c: "0.1.0" });
  });
});

describe("forge agents rollout", () => {
  it("creates, shows with its progress, pauses, resumes and aborts a rollout", async () => {
    const dir = mkdtempSync(join(tmpdir(), "mf-rollout-cli-"));
    const forge = forgeAt(ts.url, ts.caPem, dir, testAdminKey);
    const created = await forge([
      "agents",
      "rollout",
      "create",
      "--version",
      "0.2.0",
      "--selector",
      "pool=p1",
      "--batch",
      "50%",
      "--pause-between",
      "1m",
      "--json",
    ]);
    expect(created.stderr).toBe("");
    const { rollout: r } = JSON.parse(created.stdout) as { rollout: { id: string; batches: number } };
    // a and b are on 0.2.0 already: only c is left, in one batch.
    expect(r.batches).toBe(1);
    const shown = await forge(["agents", "rollout", "get", r.id]);
    expect(shown.stdout).toMatch(/state: +running/);
    expect(shown.stdout).toContain("[#############-------] 0/3 updated  0 updating  1 pending  0 failed  2 skipped");
    expect(shown.stdout).toMatch(/^c +1 +pending +0\.1\.0/m);
    expect((await forge(["agents", "rollout", "pause", r.id, "--reason", "maintenance window"])).stdout).toMatch(
      /state: +paused \(maintenance window\)/,
    );
    expect((await forge(["agents", "rollout", "resume", r.id])).stdout).toMatch(/state: +running/);
    expect((await forge(["agents", "rollout", "list"])).stdout).toMatch(new RegExp(`^${r.id} +0\\.2\\.0 +running +1/1`, "m"));
    expect((await forge(["agents", "rollout", "abort", r.id])).stdout).toMatch(/state: +aborted/);
    const again = await forge(["agents", "rollout", "abort", r.id]);
    expect(again.code).not.toBe(0);
    expect(again.stderr).toContain("is aborted: cannot abort it");
    const wrong = await forge(["agents", "rollout", "frobnicate"]);
    expect(wrong.code).toBe(2);
    expect((await forge(["agents", "rollout", "get", r.id, "--reason", "x"])).stderr).toContain(
      '--reason is not an option of "agents rollout get"',
    );
    rmSync(dir, { recursive: true, force: true });
  });
});

describe("version limits", () => {
  it("refuses a rollout that would take a node down across a major version, or below the oldest accepted", async () => {
    const node = await enrollTestNode(ts, "major");
    await ts.admin.updateNode({ nodeId: node.nodeId, labels: { pool: "p2" }, updateMask: { paths: ["labels"] } });
    const agent = new ScriptedAgent("major", node);
    agents.push(agent);
    await agent.connect("1.0.0");
    const down = ts.admin.createAgentRollout({ version: "0.2.0", selector: { pool: "p2" } });
    await expect(down).rejects.toThrow(/major: 0\.2\.0 would take the agent down across a major version \(from 1\.0\.0\)/);
    expect(await codeOf(ts.admin.createAgentRollout({ version: "0.2.0", selector: { pool: "p2" } }))).toBe(Code.FailedPrecondition);
    await push("0.0.9", Buffer.from("old"));
    await expect(ts.admin.createAgentRollout({ version: "0.0.9", selector: { pool: "p1" } })).rejects.toThrow(
      /below the oldest agent version/,
    );
    expect(await codeOf(ts.admin.createAgentRollout({ version: "9.9.9" }))).toBe(Code.FailedPrecondition);
  });
});
