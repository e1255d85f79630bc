// runtime.probe.v1 end to end: a real control plane, a real agent process serving runtimes, the
// tiny GGUF in an approved root really loaded by llama.cpp. Also: a corrupted model refused before
// load, an engine the agent does not run refused typed; and, on the handlers with a runtime the
// supervisor holds, runtime.health.v1 and runtime.unload.v1 (the process is gone afterwards).
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { mkdtempSync, rmSync, writeFileSync, readFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { pino } from "pino";
import { create, type MessageInitShape } from "@bufbuild/protobuf";
import { Code } from "@connectrpc/connect";
import { JobState } from "../../gen/proto/modelforge/admin/v1/admin_pb.js";
import {
  EngineKind,
  JobFailureCode,
  JobSpecSchema,
  ProbeInput,
  type RuntimeProfileSpecSchema,
} from "../../gen/proto/modelforge/jobs/v1/jobs_pb.js";
import { Supervisor } from "../../agent/engines/supervisor.js";
import { readStat } from "../../agent/engines/proc.js";
import { durationOf, failureFor, runtimeHealthHandler, runtimeUnloadHandler } from "../../agent/capabilities/runtime.js";
import type { JobAttempt } from "../../agent/jobs/registry.js";
import { writeTinyLlamaGguf } from "../../scripts/gguf.js";
import { startTestServer, type TestServer } from "../support/server.js";
import { enrollTestNode, eventually, type TestNode } from "../support/node.js";
import { spawnAgent, type AgentProcess } from "../support/process.js";
import { jobToEnd } from "../support/jobs.js";

let ts: TestServer;
let root: string;
let node: TestNode;
let agent: AgentProcess;
let model: { path: string; sha256: string };

const probeSpec = (
  path: string,
  sha256: string,
  runtimeProfile = "tiny-cpu",
  profile?: MessageInitShape<typeof RuntimeProfileSpecSchema>,
): MessageInitShape<typeof JobSpecSchema> => ({
  kind: {
    case: "runtimeProbe",
    value: {
      runtimeProfile,
      runtimeEnvironment: "cpu",
      artifacts: [{ path, sha256 }],
      probeInputId: "completion-v1",
      probeInput: ProbeInput.COMPLETION_V1,
      ...(profile !== undefined ? { profile } : {}),
    },
  },
});

const finished = (spec: MessageInitShape<typeof JobSpecSchema>) => jobToEnd(ts.admin, node.nodeId, spec, 45_000);

beforeAll(async () => {
  root = mkdtempSync(join(tmpdir(), "mf-runtime-root-"));
  const path = join(root, "tiny.gguf");
  model = { path, ...(await writeTinyLlamaGguf(path)) };
  ts = await startTestServer({ MODELFORGE_HEARTBEAT_INTERVAL: "200ms", MODELFORGE_LEASE_DURATION: "20s", MODELFORGE_APPROVED_ROOTS: root });
  node = await enrollTestNode(ts, "cpu-runtime");
  await ts.admin.createRuntimeProfile({ name: "tiny-cpu", engine: EngineKind.LLAMA_CPP, contextSize: 1024, threads: 1 });
  await ts.admin.createRuntimeProfile({ name: "tiny-openai", engine: EngineKind.OPENAI_HTTP, contextSize: 1024, threads: 1 });
  agent = spawnAgent(node.statePath, { MODELFORGE_AGENT_RUNTIMES: "on" });
  await eventually(
    async () => {
      const n = (await ts.admin.getNode({ nodeId: node.nodeId })).node!;
      return n.connected && n.capabilities.includes("runtime.probe.v1");
    },
    30_000,
    "the agent process online, advertising runtime.probe.v1",
  );
}, 60_000);

afterAll(async () => {
  await agent?.stop();
  await ts?.stop();
  if (root) rmSync(root, { recursive: true, force: true });
});

describe("runtime.probe.v1 through a real server and agent process", () => {
  it("loads the tiny model in llama.cpp, answers the fixed probe and reports layered health and evidence", async () => {
    const job = await finished(probeSpec(model.path, model.sha256));
    expect(job.state, JSON.stringify(job.failure)).toBe(JobState.SUCCEEDED);
    const result = job.result!.result;
    expect(result.case).toBe("runtimeProbe");
    if (result.case !== "runtimeProbe") return;
    const v = result.value;
    expect([v.processStarted, v.endpointHealthy, v.inferenceAnswered]).toEqual([true, true, true]);
    expect(v.tokensGenerated).toBeGreaterThan(0);
    expect(v.tokensGenerated).toBeLessThanOrEqual(16);
    expect(v.tokensPerSecond).toBeGreaterThan(0);
    expect(v.peakRssBytes).toBeGreaterThan(0n);
    const ms = (d?: { seconds: bigint; nanos: number }) => Number(d?.seconds ?? 0n) * 1000 + (d?.nanos ?? 0) / 1e6;
    expect(ms(v.loadDuration)).toBeGreaterThan(0);
    expect(ms(v.timeToFirstToken)).toBeGreaterThan(0);
    expect(v.runtimeId).not.toBe("");
  }, 60_000);

  it("refuses a model whose bytes no longer match the leased digest, before loading it", async () => {
    const bad = join(root, "corrupted.gguf");
    const bytes = readFileSync(model.path);
    bytes[bytes.length - 1] = (bytes[bytes.length - 1]! + 1) & 0xff;
    writeFileSync(bad, bytes);
    const job = await finished(probeSpec(bad, model.sha256));
    expect(job.state).toBe(JobState.FAILED);
    expect(job.failure).toMatchObject({ code: JobFailureCode.CHECKSUM_MISMATCH, retryable: false });
  }, 60_000);

  it("the node advertises the engines it runs, and CreateJob refuses a profile of another engine", async () => {
    const n = (await ts.admin.getNode({ nodeId: node.nodeId })).node!;
    // No openai-http command template in this agent's configuration: llama.cpp only.
    expect(n.engines).toEqual(["llama.cpp"]);
    await expect(
      ts.admin.createJob({ nodeId: node.nodeId, spec: probeSpec(model.path, model.sha256, "tiny-openai"), maxAttempts: 1 }),
    ).rejects.toMatchObject({
      code: Code.FailedPrecondition,
      message: expect.stringContaining('does not run engine "openai-http"; it runs: llama.cpp'),
    });
  });

  it("the lease carries the stored profile; a profile unknown, malformed or not the stored one is refused", async () => {
    const job = await finished(probeSpec(model.path, model.sha256));
    const leased = job.spec!.kind;
    expect(leased.case).toBe("runtimeProbe");
    if (leased.case !== "runtimeProbe") return;
    const stored = (await ts.admin.listRuntimeProfiles({})).profiles.find((p) => p.name === "tiny-cpu")!;
    expect(leased.value.profile).toMatchObject({ engine: EngineKind.LLAMA_CPP, contextSize: 1024, threads: 1 });
    expect(leased.value.profile!.contentHash).toBe(stored.spec!.contentHash);

    const refused = (spec: MessageInitShape<typeof JobSpecSchema>) => ts.admin.createJob({ nodeId: node.nodeId, spec, maxAttempts: 1 });
    await expect(refused(probeSpec(model.path, model.sha256, "no-such-profile"))).rejects.toMatchObject({
      code: Code.NotFound,
      message: expect.stringContaining('runtime profile "no-such-profile" not found'),
    });
    const other = { engine: EngineKind.LLAMA_CPP, contextSize: 2048, threads: 1, contentHash: "a".repeat(64) };
    await expect(refused(probeSpec(model.path, model.sha256, "tiny-cpu", other))).rejects.toMatchObject({
      code: Code.FailedPrecondition,
      message: expect.stringContaining("does not match runtime profile"),
    });
    for (const [profile, field] of [
      [{ engine: EngineKind.UNSPECIFIED, contentHash: "0".repeat(64) }, "profile.engine"],
      [{ engine: EngineKind.LLAMA_CPP, contentHash: "nope" }, "profile.content_hash"],
    ] as const) {
      await expect(refused(probeSpec(model.path, model.sha256, "tiny-cpu", profile))).rejects.toMatchObject({
        code: Code.InvalidArgument,
        message: expect.stringContaining(field),
      });
    }
  });
});

describe("runtime.health.v1 and runtime.unload.v1 on a held runtime", () => {
  it("reports a held runtime healthy, then unloads it and the process is gone", async () => {
    const dir = mkdtempSync(join(tmpdir(), "mf-runtime-held-"));
    const supervisor = new Supervisor({ registryPath: join(dir, "runtimes.json"), stopGraceMs: 5_000 });
    const opts = { supervisor, log: pino({ level: "silent" }) };
    const ctx: JobAttempt = {
      jobId: "j",
      attempt: 1,
      signal: new AbortController().signal,
      progress: async () => ({ cancelRequested: false }),
    };
    try {
      const runtime = await supervisor.start("llama.cpp", { modelPath: model.path, params: { contextSize: 1024, threads: 1 } });
      const spec = (kind: "runtimeHealth" | "runtimeUnload") =>
        create(JobSpecSchema, { kind: { case: kind, value: { runtimeId: runtime.id } } });
      expect((await runtimeHealthHandler(opts)(spec("runtimeHealth"), ctx)).result).toMatchObject({
        case: "runtimeHealth",
        value: { healthy: true },
      });
      const unloaded = await runtimeUnloadHandler(opts)(spec("runtimeUnload"), ctx);
      expect(unloaded.result?.case).toBe("runtimeUnload");
      expect(await readStat(runtime.pid)).toBeUndefined();
      await expect(runtimeHealthHandler(opts)(spec("runtimeHealth"), ctx)).rejects.toMatchObject({ code: JobFailureCode.NOT_FOUND });
    } finally {
      await supervisor.stopAll();
      rmSync(dir, { recursive: true, force: true });
    }
  }, 60_000);
});

describe("runtime rules", () => {
  it.each([
    [0.5, 0n, 500_000],
    [315.8886620000003, 0n, 315_888_662],
    [1999.9999999, 2n, 0],
    [-3, 0n, 0],
  ])("durationOf(%s ms) has integer nanos", (ms, seconds, nanos) => {
    expect(durationOf(ms)).toMatchObject({ seconds, nanos });
  });
  it.each([
    ["engine_not_supported", JobFailureCode.ENGINE_NOT_SUPPORTED, false],
    ["invalid_params", JobFailureCode.PROFILE_INVALID, false],
    ["health_deadline_exceeded", JobFailureCode.HEALTH_DEADLINE_EXCEEDED, true],
    ["exited_before_ready", JobFailureCode.MODEL_LOAD_FAILED, false],
    ["runtime_not_found", JobFailureCode.NOT_FOUND, false],
  ] as const)("engine failure %s is %s", (code, expected, retryable) => {
    expect(failureFor(code)).toEqual({ code: expected, retryable });
  });
});
