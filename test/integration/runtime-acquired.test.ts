// A model acquired, then probed, held and unloaded, end to end: a real control plane, a real agent
// process configured with the loopback mirror and the control plane's store, the tiny GGUF fetched
// from each and probed where the acquisition put it (the agent re-hashes it before loading); the
// openai-http engine started from the operator's template file (the llama.cpp worker playing the
// external server); GPU evidence from a fake nvidia-smi; a kept runtime checked and unloaded; an
// agent killed with a runtime held, and its successor stopping that runtime and reporting it; the
// staging an abandoned acquisition left removed when the agent starts.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createHash } from "node:crypto";
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, utimesSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import type { MessageInitShape } from "@bufbuild/protobuf";
import { JobState, type Job } from "../../gen/proto/modelforge/admin/v1/admin_pb.js";
import { EngineKind, JobFailureCode, type JobSpecSchema, ProbeInput } from "../../gen/proto/modelforge/jobs/v1/jobs_pb.js";
import { readStat } from "../../agent/engines/proc.js";
import { STAGING_DIR } from "../../agent/capabilities/artifact-acquire.js";
import { tinyLlamaGguf } from "../../scripts/gguf.js";
import { startTestServer, type TestServer } from "../support/server.js";
import { enrollTestNode, eventually, type TestNode } from "../support/node.js";
import { spawnAgent, type AgentProcess } from "../support/process.js";
import { startMirror, type Mirror } from "../support/mirror.js";
import { jobToEnd } from "../support/jobs.js";
import { writeLlamaServerTemplate } from "../support/serving.js";

const MiB = 1024n * 1024n;
const model = tinyLlamaGguf();
const commitOf = (label: string) => createHash("sha1").update(label).digest("hex");
const fromMirror = { repository: "acme/tiny-mirror", commit: commitOf("mirror") };
const fromStore = { repository: "acme/tiny-store", commit: commitOf("store") };

let base: string;
let root: string;
let ts: TestServer;
let mirror: Mirror;
let node: TestNode;
let agent: AgentProcess;
let agentEnv: Record<string, string>;
let oldStaging: string;
let freshStaging: string;

type Spec = MessageInitShape<typeof JobSpecSchema>;

const finished = (spec: Spec) => jobToEnd(ts.admin, node.nodeId, spec, 90_000);

const acquireSpec = (at: { repository: string; commit: string }): Spec => ({
  kind: {
    case: "artifactAcquire",
    value: {
      ...at,
      targetRoot: root,
      files: [{ path: "tiny.gguf", sizeBytes: BigInt(model.bytes.length), sha256: model.sha256 }],
    },
  },
});

const probeSpec = (path: string, engine: EngineKind, keepLoaded = false): Spec => ({
  kind: {
    case: "runtimeProbe",
    value: {
      // The server resolves the profile record into the lease.
      runtimeProfile: engine === EngineKind.OPENAI_HTTP ? "tiny-openai" : "tiny-cpu",
      runtimeEnvironment: "cpu",
      artifacts: [{ path, sha256: model.sha256 }],
      probeInputId: "completion-v1",
      probeInput: ProbeInput.COMPLETION_V1,
      keepLoaded,
    },
  },
});

const ms = (d?: { seconds: bigint; nanos: number }) => Number(d?.seconds ?? 0n) * 1000 + (d?.nanos ?? 0) / 1e6;

function probeResult(job: Job) {
  expect(job.state, JSON.stringify(job.failure)).toBe(JobState.SUCCEEDED);
  const result = job.result!.result;
  if (result.case !== "runtimeProbe") throw new Error(`not a probe result: ${result.case}`);
  return result.value;
}

/** The runtimes the agent has recorded (its registry file beside its state). */
function registered(): { id: string; pid: number }[] {
  const path = join(dirname(node.statePath), "runtimes.json");
  return existsSync(path) ? (JSON.parse(readFileSync(path, "utf8")) as { runtimes: { id: string; pid: number }[] }).runtimes : [];
}

async function online(what: string): Promise<void> {
  await eventually(
    async () => {
      const n = (await ts.admin.getNode({ nodeId: node.nodeId })).node!;
      return n.connected && n.capabilities.includes("runtime.probe.v1") && n.capabilities.includes("artifact.acquire.v1");
    },
    60_000,
    what,
  );
}

async function pushToStore(at: { repository: string; commit: string }): Promise<void> {
  const common = { ...at, path: "tiny.gguf", sizeBytes: BigInt(model.bytes.length), sha256: model.sha256 };
  let offset = Number((await ts.admin.uploadArtifactChunk({ ...common, offset: 0n })).receivedBytes);
  while (offset < model.bytes.length) {
    const data = model.bytes.subarray(offset, offset + 1024 * 1024);
    offset = Number((await ts.admin.uploadArtifactChunk({ ...common, offset: BigInt(offset), data })).receivedBytes);
  }
}

beforeAll(async () => {
  base = mkdtempSync(join(tmpdir(), "mf-acquired-"));
  root = join(base, "root");
  mkdirSync(root);
  // What an acquisition abandoned two days ago left, and one still young enough to be resumed.
  const stage = (jobId: string, ageMs: number) => {
    const dir = join(root, STAGING_DIR, jobId);
    mkdirSync(dir, { recursive: true });
    writeFileSync(join(dir, "tiny.gguf"), model.bytes.subarray(0, 1000));
    const t = (Date.now() - ageMs) / 1000;
    utimesSync(join(dir, "tiny.gguf"), t, t);
    utimesSync(dir, t, t);
    return dir;
  };
  oldStaging = stage("0b0e0f00-dead-4bad-8bad-000000000001", 48 * 3_600_000);
  freshStaging = stage("0b0e0f00-dead-4bad-8bad-000000000002", 60_000);

  mirror = await startMirror();
  mirror.put(fromMirror.repository, fromMirror.commit, "tiny.gguf", { content: model.bytes });
  const templatePath = join(base, "openai-http.json");
  writeLlamaServerTemplate(templatePath);
  // The fake nvidia-smi lists every process as using 100 MiB: a runtime's evidence is its share.
  const gpuDir = join(base, "gpu");
  mkdirSync(gpuDir);
  writeFileSync(join(gpuDir, "compute_apps_mib"), "100");

  ts = await startTestServer({ MODELFORGE_HEARTBEAT_INTERVAL: "200ms", MODELFORGE_LEASE_DURATION: "30s", MODELFORGE_APPROVED_ROOTS: root });
  await pushToStore(fromStore);
  node = await enrollTestNode(ts, "acquire-and-probe");
  await ts.admin.createRuntimeProfile({ name: "tiny-cpu", engine: EngineKind.LLAMA_CPP, contextSize: 1024, threads: 1 });
  await ts.admin.createRuntimeProfile({ name: "tiny-openai", engine: EngineKind.OPENAI_HTTP, contextSize: 1024, threads: 1 });
  agentEnv = {
    MODELFORGE_AGENT_RUNTIMES: "on",
    MODELFORGE_AGENT_ARTIFACT_SOURCES: `${mirror.url},control-plane`,
    MODELFORGE_AGENT_ARTIFACT_ROOTS: root,
    MODELFORGE_AGENT_OPENAI_HTTP_TEMPLATE: templatePath,
    MODELFORGE_AGENT_STAGING_MAX_AGE: "1h",
    FAKE_NVIDIA_SMI_DIR: gpuDir,
  };
  agent = spawnAgent(node.statePath, agentEnv);
  await online("the agent process online with artifacts and runtimes");
}, 120_000);

afterAll(async () => {
  await agent?.stop();
  await ts?.stop();
  await mirror?.close();
  if (base) rmSync(base, { recursive: true, force: true });
});

// In order: the model is acquired, then probed, held and unloaded by the same agent.
describe.sequential("an acquired model, probed through a real server and agent process", { timeout: 180_000 }, () => {
  it("removes the staging of an abandoned acquisition when the agent starts, and keeps a young one", async () => {
    await eventually(() => !existsSync(oldStaging), 30_000, "the abandoned staging removed");
    expect(existsSync(freshStaging)).toBe(true);
    expect(agent.output()).toContain("removed abandoned artifact staging");
  });

  it.each([
    ["the mirror", fromMirror, `mirror:127.0.0.1`],
    ["the control plane's store", fromStore, "control-plane"],
  ])("acquires the tiny GGUF from %s, then probes it where it landed", async (_, at, source) => {
    const acquired = await finished(acquireSpec(at));
    expect(acquired.state, JSON.stringify(acquired.failure)).toBe(JobState.SUCCEEDED);
    const result = acquired.result!.result;
    if (result.case !== "artifactAcquire") throw new Error("not an acquire result");
    expect(result.value.source).toContain(source);
    const path = join(result.value.path, "tiny.gguf");
    expect(path).toBe(join(root, at.repository, at.commit, "tiny.gguf"));

    const v = probeResult(await finished(probeSpec(path, EngineKind.LLAMA_CPP)));
    expect([v.processStarted, v.endpointHealthy, v.inferenceAnswered]).toEqual([true, true, true]);
    expect(ms(v.loadDuration)).toBeGreaterThan(0);
    expect(ms(v.timeToFirstToken)).toBeGreaterThan(0);
    expect(v.tokensGenerated).toBeGreaterThan(0);
    expect(v.tokensPerSecond).toBeGreaterThan(0);
    expect(v.peakRssBytes).toBeGreaterThan(10n * MiB);
    // The runtime's own processes only (every process on the machine is listed at 100 MiB).
    expect(v.peakGpuMemoryBytes).toBeGreaterThanOrEqual(100n * MiB);
    expect(v.peakGpuMemoryBytes % (100n * MiB)).toBe(0n);
    expect(v.peakGpuMemoryBytes).toBeLessThan(1000n * MiB);
    // Probed and unloaded: nothing stays registered.
    expect(registered()).toEqual([]);
  });

  it("refuses to load an acquired file whose bytes changed since, before loading it", async () => {
    const at = { repository: "acme/tiny-tampered", commit: commitOf("tampered") };
    mirror.put(at.repository, at.commit, "tiny.gguf", { content: model.bytes });
    const acquired = await finished(acquireSpec(at));
    expect(acquired.state, JSON.stringify(acquired.failure)).toBe(JobState.SUCCEEDED);
    const path = join(root, at.repository, at.commit, "tiny.gguf");
    const bytes = readFileSync(path);
    bytes[bytes.length - 1] = (bytes[bytes.length - 1]! + 1) & 0xff;
    writeFileSync(path, bytes);
    const job = await finished(probeSpec(path, EngineKind.LLAMA_CPP));
    expect(job.failure).toMatchObject({ code: JobFailureCode.CHECKSUM_MISMATCH });
  });

  it("runs the openai-http engine from the operator's template file", async () => {
    const path = join(root, fromMirror.repository, fromMirror.commit, "tiny.gguf");
    const v = probeResult(await finished(probeSpec(path, EngineKind.OPENAI_HTTP)));
    expect([v.processStarted, v.endpointHealthy, v.inferenceAnswered]).toEqual([true, true, true]);
    expect(v.tokensGenerated).toBeGreaterThan(0);
    expect(v.peakRssBytes).toBeGreaterThan(10n * MiB);
    expect(registered()).toEqual([]);
  });

  it("keeps a probed runtime loaded when asked; health answers, unload frees its process", async () => {
    const path = join(root, fromStore.repository, fromStore.commit, "tiny.gguf");
    const v = probeResult(await finished(probeSpec(path, EngineKind.LLAMA_CPP, true)));
    const held = registered().find((r) => r.id === v.runtimeId);
    expect(held).toBeDefined();
    expect(await readStat(held!.pid)).toBeDefined();
    const runtimeId = v.runtimeId;

    const health = await finished({ kind: { case: "runtimeHealth", value: { runtimeId } } });
    expect(health.state, JSON.stringify(health.failure)).toBe(JobState.SUCCEEDED);
    expect(health.result!.result).toMatchObject({ case: "runtimeHealth", value: { healthy: true } });

    const unload = await finished({ kind: { case: "runtimeUnload", value: { runtimeId } } });
    expect(unload.state, JSON.stringify(unload.failure)).toBe(JobState.SUCCEEDED);
    const freed = unload.result!.result;
    expect(freed.case === "runtimeUnload" && freed.value.freedBytes > 0n).toBe(true);
    expect(await readStat(held!.pid)).toBeUndefined();
    expect(registered()).toEqual([]);

    const after = await finished({ kind: { case: "runtimeHealth", value: { runtimeId } } });
    expect(after.failure).toMatchObject({ code: JobFailureCode.NOT_FOUND });
  });

  it("a restarted agent stops the runtime its killed predecessor held, and reports it", async () => {
    const path = join(root, fromMirror.repository, fromMirror.commit, "tiny.gguf");
    const v = probeResult(await finished(probeSpec(path, EngineKind.LLAMA_CPP, true)));
    const held = registered().find((r) => r.id === v.runtimeId)!;
    expect(held).toBeDefined();
    await agent.kill();
    // The runtime is its own process group: it outlives the agent that was killed.
    expect(await readStat(held.pid)).toBeDefined();

    agent = spawnAgent(node.statePath, agentEnv);
    await eventually(() => agent.output().includes("orphaned runtime from an earlier agent"), 60_000, "the orphan reported in the log");
    expect(await readStat(held.pid)).toBeUndefined();
    await online("the restarted agent online");
    const health = await finished({ kind: { case: "runtimeHealth", value: { runtimeId: v.runtimeId } } });
    expect(health.state, JSON.stringify(health.failure)).toBe(JobState.SUCCEEDED);
    const r = health.result!.result;
    expect(r.case).toBe("runtimeHealth");
    if (r.case !== "runtimeHealth") return;
    expect(r.value.healthy).toBe(false);
    expect(r.value.detail).toContain(`orphaned by an earlier agent process (pid ${held.pid}`);
    expect(r.value.detail).toContain("stopped by this agent at start");
    const unload = await finished({ kind: { case: "runtimeUnload", value: { runtimeId: v.runtimeId } } });
    expect(unload.state, JSON.stringify(unload.failure)).toBe(JobState.SUCCEEDED);
    expect(registered()).toEqual([]);
  });

  it("an agent refuses to start with a template that runs a shell", async () => {
    const bad = join(base, "bad-template.json");
    writeFileSync(bad, JSON.stringify({ command: ["/bin/sh", "-c", "serve {model} --port {port}"] }));
    const refused = spawnAgent(node.statePath, { ...agentEnv, MODELFORGE_AGENT_OPENAI_HTTP_TEMPLATE: bad });
    const code = await new Promise<number | null>((resolve) => refused.child.once("exit", resolve));
    expect(code).toBe(1);
    expect(refused.output()).toContain("MODELFORGE_AGENT_OPENAI_HTTP_TEMPLATE: the executable cannot be a shell or launcher (sh)");
  });
});
