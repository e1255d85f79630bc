// Fleet upgrades end to end with real agent processes running the built single-file agent: two
// versions from the same tree with different version stamps, each node's agent run as the systemd
// unit runs it (update-prepare from the installed agent, then the agent update/current links to,
// restarted on failure). A rollout in batches of 2 brings 5 nodes to the new version; a release
// that exits at start pauses the rollout after its first batch while those nodes roll back by
// themselves and report it; a digest or signature mismatch is refused on the node, nothing swapped.
// The nodes serve two deployments of the tiny GGUF: a batch counts as healthy only once its nodes'
// replicas are READY again, so the rollout ends with them READY; the node of a deployment's only
// replica goes last, and only once a surge replica serves elsewhere.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { execFile, spawn, type ChildProcess } from "node:child_process";
import { createHash, generateKeyPairSync } from "node:crypto";
import { copyFileSync, mkdirSync, mkdtempSync, readFileSync, readlinkSync, realpathSync, rmSync, writeFileSync, chmodSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { promisify } from "node:util";
import { RolloutState } from "../../gen/proto/modelforge/admin/v1/agent_upgrades_pb.js";
import { DeploymentState } from "../../gen/proto/modelforge/deployment/v1/deployment_pb.js";
import { EngineKind } from "../../gen/proto/modelforge/jobs/v1/jobs_pb.js";
import { writeTinyLlamaGguf } from "../../scripts/gguf.js";
import { deployReady, storeArtifact, writeLlamaServerTemplate } from "../support/serving.js";
import { startTestServer, testAdminKey, type TestServer } from "../support/server.js";
import { enrollTestNode, type TestNode } from "../support/node.js";
import { repoRoot } from "../support/process.js";
import { forgeAt, type ForgeRun } from "../support/forge.js";
import { waitFor } from "../support/wait.js";

const run = promisify(execFile);
const platform = `linux-${process.arch}`;
let ts: TestServer;
let work: string;
/** Where the serving nodes put the model. */
let root: string;
const built = join(repoRoot, "dist/agent/modelforge-agent.mjs");
const stamp = (v: string) => `var agentVersion = { "version": "${v}" }.version;`;

/** The built agent with another version stamp: the same tree, another version. */
function stamped(version: string): Buffer {
  const text = readFileSync(built, "utf8");
  const own = stamp(JSON.parse(readFileSync(join(repoRoot, "package.json"), "utf8")).version as string);
  if (text.split(own).length !== 2) throw new Error(`the bundle's version stamp is not "${own}" exactly once: update this test`);
  return Buffer.from(text.replace(own, stamp(version)));
}

/** One node's agent as its service runs it: ExecStartPre=update-prepare, ExecStart=current, Restart=on-failure. */
class Service {
  private child: ChildProcess | undefined;
  private stopped = false;
  output = "";
  readonly installed: string;
  constructor(
    readonly name: string,
    readonly node: TestNode,
    env: Record<string, string> = {},
  ) {
    this.installed = mkdtempSync(join(work, `installed-${name}-`));
    copyFileSync(built, join(this.installed, "modelforge-agent.mjs"));
    // Where an install keeps llama.cpp's prebuilts (a GPU agent's CUDA builds): releases link it.
    mkdirSync(join(this.installed, "node_modules"));
    void this.loop({ PATH: process.env.PATH ?? "", HOME: process.env.HOME ?? "/tmp", MODELFORGE_AGENT_BACKOFF_MAX: "500ms", ...env });
  }
  get current(): string {
    return readlinkSync(join(dirname(this.node.statePath), "update/current"));
  }
  private async loop(env: Record<string, string>): Promise<void> {
    const state = ["--state", this.node.statePath];
    while (!this.stopped) {
      const prepared = await run(process.execPath, [join(this.installed, "modelforge-agent.mjs"), "update-prepare", ...state], { env });
      this.output += prepared.stderr;
      const current = join(dirname(this.node.statePath), "update/current/modelforge-agent.mjs");
      const child = spawn(process.execPath, [current, "run", ...state], { env, stdio: ["ignore", "pipe", "pipe"] });
      this.child = child;
      child.stdout!.on("data", (c: Buffer) => (this.output += c.toString()));
      child.stderr!.on("data", (c: Buffer) => (this.output += c.toString()));
      const code = await new Promise<number | null>((resolve) => child.on("exit", (c) => resolve(c)));
      if (code === 0) return;
    }
  }
  async stop(): Promise<void> {
    this.stopped = true;
    const child = this.child;
    if (child === undefined || child.exitCode !== null) return;
    const exited = new Promise((resolve) => child.on("exit", resolve));
    child.kill("SIGTERM");
    await exited;
  }
}

const services: Service[] = [];
let forge: (args: string[]) => Promise<ForgeRun>;

/** Pushes a release as an operator does: forge agents releases push. */
async function pushRelease(version: string, content: Buffer): Promise<string> {
  const file = join(work, `agent-${version}.mjs`);
  writeFileSync(file, content);
  const pushed = await forge(["agents", "releases", "push", file, "--version", version, "--platform", platform]);
  expect(pushed.stderr).toBe("");
  return createHash("sha256").update(content).digest("hex");
}

const versions = async () => Object.fromEntries((await ts.admin.listNodes({})).nodes.map((n) => [n.name, n.agentVersion]));
const rolloutIn = (id: string, state: RolloutState) =>
  waitFor(
    async () => {
      const r = (await ts.admin.getAgentRollout({ rolloutId: id })).rollout!;
      return r.state === state ? r : undefined;
    },
    { timeout: 150_000, interval: 250, what: `rollout ${RolloutState[state]}` },
  );

beforeAll(async () => {
  await run(process.execPath, ["scripts/build.mjs", "--if-stale", "--bundles"], { cwd: repoRoot });
  work = mkdtempSync(join(tmpdir(), "mf-update-"));
  root = mkdtempSync(join(tmpdir(), "mf-update-models-"));
  // Heartbeats each second: a restarting agent's quiet time is its restart, not up to 10 s more.
  ts = await startTestServer({ MODELFORGE_APPROVED_ROOTS: root, MODELFORGE_HEARTBEAT_INTERVAL: "1s" });
  // The runtime is the llama.cpp worker from source through the openai-http engine: the built
  // agent's own llama.cpp engine needs its worker file beside it, which a release does not carry.
  const template = join(work, "openai-http.json");
  writeLlamaServerTemplate(template);
  const serving = {
    MODELFORGE_AGENT_RUNTIMES: "on",
    MODELFORGE_AGENT_ARTIFACT_SOURCES: "control-plane",
    MODELFORGE_AGENT_ARTIFACT_ROOTS: root,
    MODELFORGE_AGENT_OPENAI_HTTP_TEMPLATE: template,
  };
  forge = forgeAt(ts.url, ts.caPem, work, testAdminKey);
  const signer = generateKeyPairSync("ed25519");
  const keyFile = join(work, "release.pub");
  writeFileSync(keyFile, signer.publicKey.export({ type: "spki", format: "pem" }) as string);
  for (const name of ["n1", "n2", "n3", "n4", "n5", "n6"]) {
    const node = await enrollTestNode(ts, name);
    const pool = name === "n6" ? "signed" : "main";
    await ts.admin.updateNode({ nodeId: node.nodeId, labels: { pool }, updateMask: { paths: ["labels"] } });
    // n6 takes only releases signed with its key.
    services.push(new Service(name, node, pool === "signed" ? { MODELFORGE_AGENT_RELEASE_KEY: keyFile } : serving));
  }
  await waitFor(async () => (await ts.admin.listNodes({})).nodes.every((n) => n.agentVersion === "0.1.0" && n.host?.architecture), {
    timeout: 60_000,
    what: "six agents connected with their inventories",
  });
  const model = join(work, "tiny.gguf");
  const { sha256 } = await writeTinyLlamaGguf(model);
  await storeArtifact(ts.admin, { repository: "acme/tiny", commit: "c".repeat(40), path: "tiny.gguf" }, model, sha256);
  await ts.admin.createRuntimeProfile({ name: "tiny-http", engine: EngineKind.OPENAI_HTTP, contextSize: 1024, threads: 1 });
  await waitFor(
    async () => (await ts.admin.listNodes({})).nodes.every((n) => n.name === "n6" || n.capabilities.includes("deployment.load.v1")),
    {
      timeout: 60_000,
      what: "the main pool's agents advertising deployment.load.v1",
    },
  );
  await deployReady(ts.admin, {
    name: "solo",
    selector: { pool: "main" },
    runtimeProfile: "tiny-http",
    repository: "acme/tiny",
    commit: "c".repeat(40),
    targetRoot: root,
  });
  await deployReady(ts.admin, {
    name: "tiny",
    selector: { pool: "main" },
    replicas: 2,
    runtimeProfile: "tiny-http",
    repository: "acme/tiny",
    commit: "c".repeat(40),
    targetRoot: root,
  });
}, 180_000);
afterAll(async () => {
  await Promise.all(services.map((s) => s.stop()));
  await ts?.stop();
  rmSync(work, { recursive: true, force: true });
  rmSync(root, { recursive: true, force: true });
});

describe("a rollout with real agents", () => {
  it("brings 5 agents to the new version in batches of 2, each swapped and restarted by its service", async () => {
    await pushRelease("0.2.0", stamped("0.2.0"));
    const soloNode = (await ts.admin.getDeployment({ deployment: "solo" })).deployment!.replicas[0]!.nodeId;
    const created = await ts.admin.createAgentRollout({ version: "0.2.0", selector: { pool: "main" }, batchPercent: 40 });
    expect(created.rollout?.batches).toBe(3);
    // "solo" has one replica: its node goes last, after a surge replica is READY elsewhere, so
    // solo serves throughout. Watched every 100 ms while the rollout runs.
    expect(created.rollout!.nodes.find((n) => n.nodeId === soloNode)?.batch).toBe(2);
    let soloDark = 0;
    let watching = true;
    const watch = (async () => {
      while (watching) {
        const solo = (await ts.admin.getDeployment({ deployment: "solo" })).deployment!;
        if (solo.readyReplicas === 0) soloDark += 1;
        await new Promise((r) => setTimeout(r, 100));
      }
    })();
    const done = await rolloutIn(created.rollout!.id, RolloutState.COMPLETED).finally(() => (watching = false));
    await watch;
    expect(soloDark).toBe(0);
    const surged = (await ts.admin.listAuditEvents({ action: "agent.update.surge" })).events;
    expect(surged.map((e) => e.targetId)).toEqual([soloNode]);
    // The surge ends with the update: solo is back to one replica, on its node.
    await waitFor(
      async () => {
        const solo = (await ts.admin.getDeployment({ deployment: "solo" })).deployment!;
        return solo.replicas.length === 1 && solo.replicas[0]!.nodeId === soloNode && solo.readyReplicas === 1;
      },
      { timeout: 60_000, interval: 250, what: "solo back to its one replica" },
    );
    expect(done.counts).toMatchObject({ updated: 5, failed: 0, pending: 0 });
    // Its nodes' replicas were READY again before each batch counted as healthy, so at the end too.
    const tiny = (await ts.admin.getDeployment({ deployment: "tiny" })).deployment!;
    expect(DeploymentState[tiny.deployment!.state]).toBe("READY");
    expect(tiny.replicas.map((r) => DeploymentState[r.state])).toEqual(["READY", "READY"]);
    // An agent restarting for its update keeps its replicas: they reload in place, none is moved.
    expect((await ts.admin.listAuditEvents({ action: "deployment.replica_unplaced" })).events).toEqual([]);
    expect(await versions()).toEqual({ n1: "0.2.0", n2: "0.2.0", n3: "0.2.0", n4: "0.2.0", n5: "0.2.0", n6: "0.1.0" });
    for (const s of services.slice(0, 5)) {
      expect(s.current).toMatch(/update\/releases\/0\.2\.0-[0-9a-f]{12}$/);
      expect(readlinkSync(join(s.current, "node_modules"))).toBe(realpathSync(join(s.installed, "node_modules")));
    }
    // Batches of at most two, one after the other.
    const batches = done.nodes.map((n) => n.batch);
    expect([0, 1, 2].map((b) => batches.filter((x) => x === b).length)).toEqual([2, 2, 1]);
  }, 200_000);

  it("pauses after the first batch of a release that exits at start; its nodes roll back by themselves and report it", async () => {
    const bad = Buffer.from(`if (process.argv.includes("--version")) console.log("0.3.0"); else process.exit(1);\n`);
    await pushRelease("0.3.0", bad);
    const created = await ts.admin.createAgentRollout({ version: "0.3.0", selector: { pool: "main" }, batchPercent: 40 });
    const paused = await rolloutIn(created.rollout!.id, RolloutState.PAUSED);
    expect(paused.pausedReason).toMatch(/^batch 1 of 3 failed: n\d: rolled back: 0\.3\.0 exited 3 times before a healthy session/);
    await waitFor(async () => (await ts.admin.getAgentRollout({ rolloutId: created.rollout!.id })).rollout!.counts!.failed === 2, {
      timeout: 60_000,
      what: "both nodes of the batch reported",
    });
    expect(await versions()).toEqual({ n1: "0.2.0", n2: "0.2.0", n3: "0.2.0", n4: "0.2.0", n5: "0.2.0", n6: "0.1.0" });
    for (const s of services.slice(0, 5)) expect(s.current).toMatch(/0\.2\.0-/);
    const failed = (await ts.admin.listAuditEvents({ action: "agent.update.failed" })).events;
    expect(failed).toHaveLength(2);
    await ts.admin.abortAgentRollout({ rolloutId: created.rollout!.id, reason: "bad release" });
  }, 200_000);

  it("refuses a release on the node when its digest or signature does not match, with nothing swapped", async () => {
    const content = stamped("0.4.0");
    const sha256 = await pushRelease("0.4.0", content);
    // The store's copy goes bad after it was recorded: the node must notice.
    const blob = join(ts.config.artifactDir, "blobs", sha256.slice(0, 2), sha256);
    chmodSync(blob, 0o600);
    writeFileSync(blob, Buffer.concat([content.subarray(0, content.length - 1), Buffer.from("!")]));
    const tampered = await ts.admin.createAgentRollout({ version: "0.4.0", selector: { pool: "main" }, batchPercent: 20 });
    const paused = await rolloutIn(tampered.rollout!.id, RolloutState.PAUSED);
    expect(paused.pausedReason).toMatch(/failed: n\d: refused: digest mismatch/);
    await ts.admin.abortAgentRollout({ rolloutId: tampered.rollout!.id });
    // n6 holds a release key; the release is unsigned.
    const before = services[5]!.current;
    const unsigned = await ts.admin.createAgentRollout({ version: "0.2.0", selector: { pool: "signed" } });
    const refused = await rolloutIn(unsigned.rollout!.id, RolloutState.PAUSED);
    expect(refused.pausedReason).toContain("n6: refused: the signature does not verify against the release signing key");
    expect(services[5]!.current).toBe(before);
    expect(await versions()).toMatchObject({ n6: "0.1.0" });
  }, 200_000);
});
