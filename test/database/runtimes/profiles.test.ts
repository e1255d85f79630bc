// Runtime profiles: the pure rules (name grammar, bounds, canonical hash) as a table, and the
// store's immutability through a real server: idempotent create, conflict on other content,
// racing creators, paging and the audit trail.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { Code } from "@connectrpc/connect";
import { EngineKind } from "../../../gen/proto/modelforge/jobs/v1/jobs_pb.js";
import {
  checkProfileContent,
  checkProfileName,
  profileContentHash,
  ProfileRuleError,
  type ProfileContent,
} from "../../../server/runtimes/profile.js";
import { startTestServer, type TestServer } from "../../support/server.js";

const llama = (contextSize = 0, threads = 0): ProfileContent => ({ engine: EngineKind.LLAMA_CPP, contextSize, threads });

describe("profile rules", () => {
  it.each([
    ["tiny", true],
    ["llama-3.1-8b_q4", true],
    ["0day", true],
    ["a".repeat(64), true],
    ["a".repeat(65), false],
    ["", false],
    ["-leading", false],
    ["Upper", false],
    ["with space", false],
    ["dots/../up", false],
    ["naïve", false],
  ])("name %j valid: %s", (name, ok) => {
    if (ok) expect(() => checkProfileName(name)).not.toThrow();
    else expect(() => checkProfileName(name)).toThrow(ProfileRuleError);
  });

  it.each([
    [llama(), undefined],
    [llama(1_048_576, 1024), undefined],
    [llama(1_048_577), "context_size"],
    [llama(0, 1025), "threads"],
    [llama(-1), "context_size"],
    [llama(1.5), "context_size"],
    [{ engine: EngineKind.UNSPECIFIED, contextSize: 0, threads: 0 }, "engine"],
    [{ engine: 99 as EngineKind, contextSize: 0, threads: 0 }, "engine"],
    [{ engine: EngineKind.OPENAI_HTTP, contextSize: 0, threads: 0, memoryBytes: 2n ** 50n }, undefined],
    [{ engine: EngineKind.OPENAI_HTTP, contextSize: 0, threads: 0, memoryBytes: 2n ** 50n + 1n }, "memory_bytes"],
    [{ ...llama(), memoryBytes: 1n }, "memory_bytes"],
    // GPUs: llama.cpp offloads layers to gpu_count GPUs; openai-http declares memory per GPU.
    [{ ...llama(), gpuLayers: 1024, gpuCount: 64 }, undefined],
    [{ ...llama(), gpuLayersAll: true, gpuCount: 2, gpuShared: true }, undefined],
    [{ ...llama(), gpuLayers: 1025, gpuCount: 1 }, "gpu_layers"],
    [{ ...llama(), gpuLayers: 10, gpuCount: 65 }, "gpu_count"],
    [{ ...llama(), gpuLayers: 1.5, gpuCount: 1 }, "gpu_layers"],
    [{ ...llama(), gpuLayers: 10 }, "gpu_count"],
    [{ ...llama(), gpuLayersAll: true }, "gpu_count"],
    [{ ...llama(), gpuCount: 1 }, "gpu_layers"],
    [{ ...llama(), gpuLayers: 10, gpuLayersAll: true, gpuCount: 1 }, "gpu_layers"],
    [{ ...llama(), gpuLayers: 10, gpuCount: 1, gpuMemoryBytes: 1n }, "gpu_memory_bytes"],
    [{ ...llama(), gpuShared: true }, "gpu_shared"],
    [{ engine: EngineKind.OPENAI_HTTP, contextSize: 0, threads: 0, gpuCount: 8, gpuMemoryBytes: 2n ** 50n }, undefined],
    [{ engine: EngineKind.OPENAI_HTTP, contextSize: 0, threads: 0, gpuCount: 1 }, undefined],
    [{ engine: EngineKind.OPENAI_HTTP, contextSize: 0, threads: 0, gpuCount: 1, gpuMemoryBytes: 2n ** 50n + 1n }, "gpu_memory_bytes"],
    [{ engine: EngineKind.OPENAI_HTTP, contextSize: 0, threads: 0, gpuMemoryBytes: 1n }, "gpu_count"],
    [{ engine: EngineKind.OPENAI_HTTP, contextSize: 0, threads: 0, gpuCount: 1, gpuLayers: 4 }, "gpu_layers"],
    [{ engine: EngineKind.OPENAI_HTTP, contextSize: 0, threads: 0, gpuCount: 1, gpuLayersAll: true }, "gpu_layers"],
    // Batching: the built-in engine's, bounded; an openai-http server schedules its own.
    [{ ...llama(), parallel: 256, batchSize: 65_536 }, undefined],
    [{ ...llama(), parallel: 257 }, "parallel"],
    [{ ...llama(), parallel: 1.5 }, "parallel"],
    [{ ...llama(), parallel: -1 }, "parallel"],
    [{ ...llama(), batchSize: 65_537 }, "batch_size"],
    [{ engine: EngineKind.OPENAI_HTTP, contextSize: 0, threads: 0, parallel: 4 }, "parallel"],
    [{ engine: EngineKind.OPENAI_HTTP, contextSize: 0, threads: 0, batchSize: 512 }, "batch_size"],
    [{ ...llama(), embeddings: true }, undefined],
    [{ engine: EngineKind.OPENAI_HTTP, contextSize: 0, threads: 0, embeddings: true }, "embeddings"],
  ])("content %o refused on: %s", (content, field) => {
    if (field === undefined) expect(() => checkProfileContent(content)).not.toThrow();
    else expect(() => checkProfileContent(content)).toThrow(expect.objectContaining({ field }));
  });

  it("hashes the canonical content: equal content equal hash, any change another", () => {
    const base = profileContentHash(llama(1024, 1));
    expect(base).toMatch(/^[0-9a-f]{64}$/);
    expect(profileContentHash({ threads: 1, contextSize: 1024, engine: EngineKind.LLAMA_CPP })).toBe(base);
    const others = [llama(1024, 2), llama(2048, 1), { ...llama(1024, 1), engine: EngineKind.OPENAI_HTTP }].map(profileContentHash);
    expect(new Set([base, ...others]).size).toBe(4);
    // Pinned: a hash once in a lease must mean the same content forever.
    expect(base).toBe("9294202b669ac09c4180721872e776c5a1ce03ab47c55b57d732a47c87269a80");
    // Declared memory is content when set, and leaves the hashes of profiles without it alone.
    expect(profileContentHash({ ...llama(1024, 1), memoryBytes: 0n })).toBe(base);
    const remote = { engine: EngineKind.OPENAI_HTTP, contextSize: 0, threads: 0 };
    expect(profileContentHash({ ...remote, memoryBytes: 1n })).not.toBe(profileContentHash(remote));
    // So are the GPU fields, each of them.
    expect(profileContentHash({ ...llama(1024, 1), gpuLayers: 0, gpuLayersAll: false, gpuCount: 0, gpuShared: false })).toBe(base);
    const gpu = { ...llama(1024, 1), gpuLayers: 8, gpuCount: 1 };
    const gpuHashes = [
      gpu,
      { ...gpu, gpuLayers: 9 },
      { ...gpu, gpuLayers: 0, gpuLayersAll: true },
      { ...gpu, gpuCount: 2 },
      { ...gpu, gpuShared: true },
      { ...remote, gpuCount: 1 },
      { ...remote, gpuCount: 1, gpuMemoryBytes: 1n },
    ].map(profileContentHash);
    expect(new Set([base, ...gpuHashes]).size).toBe(8);
    // And the batching fields.
    expect(profileContentHash({ ...llama(1024, 1), parallel: 0, batchSize: 0 })).toBe(base);
    const batching = [
      { ...llama(1024, 1), parallel: 4 },
      { ...llama(1024, 1), parallel: 8 },
      { ...llama(1024, 1), batchSize: 256 },
      { ...llama(1024, 1), embeddings: true },
    ];
    expect(new Set([base, ...batching.map(profileContentHash)]).size).toBe(5);
    expect(profileContentHash({ ...llama(1024, 1), embeddings: false })).toBe(base);
  });
});

describe("runtime profiles through the server", () => {
  let ts: TestServer;
  beforeAll(async () => {
    ts = await startTestServer();
  });
  afterAll(async () => ts?.stop());

  it("creates once; the same content again is not a new profile; other content under the name is already_exists", async () => {
    const first = await ts.admin.createRuntimeProfile({ name: "gpu-8k", engine: EngineKind.LLAMA_CPP, contextSize: 8192, threads: 4 });
    expect(first.created).toBe(true);
    expect(first.profile?.spec).toMatchObject({ engine: EngineKind.LLAMA_CPP, contextSize: 8192, threads: 4 });
    expect(first.profile?.spec?.contentHash).toBe(profileContentHash(llama(8192, 4)));

    const again = await ts.admin.createRuntimeProfile({ name: "gpu-8k", engine: EngineKind.LLAMA_CPP, contextSize: 8192, threads: 4 });
    expect(again.created).toBe(false);
    expect(again.profile?.createdAt).toEqual(first.profile?.createdAt);

    await expect(
      ts.admin.createRuntimeProfile({ name: "gpu-8k", engine: EngineKind.LLAMA_CPP, contextSize: 8192, threads: 8 }),
    ).rejects.toMatchObject({ code: Code.AlreadyExists, message: expect.stringContaining("create one under a new name") });

    const audit = await ts.admin.listAuditEvents({ action: "runtime_profile.created", targetId: "gpu-8k" });
    expect(audit.events).toHaveLength(1);
    expect(audit.events[0]!.details).toMatchObject({ engine: "llama.cpp", contextSize: "8192", threads: "4" });
  });

  it("refuses malformed input with invalid_argument naming the field", async () => {
    for (const [req, field] of [
      [{ name: "Nope", engine: EngineKind.LLAMA_CPP }, "name"],
      [{ name: "x", engine: EngineKind.UNSPECIFIED }, "engine"],
      [{ name: "x", engine: EngineKind.LLAMA_CPP, threads: 5000 }, "threads"],
      [{ name: "x".repeat(65), engine: EngineKind.LLAMA_CPP }, "name"],
      // Bounded at the edge (the annotations in proto/), before any rule of meaning.
      [{ name: "x", engine: EngineKind.LLAMA_CPP, gpuLayers: 1025, gpuCount: 1 }, "gpu_layers: must be from 0 to 1024"],
      [{ name: "x", engine: EngineKind.OPENAI_HTTP, gpuCount: 65 }, "gpu_count: must be from 0 to 64"],
      [{ name: "x", engine: EngineKind.OPENAI_HTTP, gpuCount: 1, gpuMemoryBytes: 2n ** 50n + 1n }, "gpu_memory_bytes: must be from 0 to"],
      [{ name: "x", engine: EngineKind.LLAMA_CPP, gpuLayers: 8 }, "gpu_count: must be at least 1 to offload layers"],
    ] as const) {
      await expect(ts.admin.createRuntimeProfile(req)).rejects.toMatchObject({
        code: Code.InvalidArgument,
        message: expect.stringContaining(field),
      });
    }
  });

  it("stores a GPU profile and resolves it into the spec a lease carries", async () => {
    const made = await ts.admin.createRuntimeProfile({
      name: "vllm-tp2",
      engine: EngineKind.OPENAI_HTTP,
      gpuCount: 2,
      gpuMemoryBytes: 20n * 2n ** 30n,
      gpuShared: true,
    });
    expect(made.profile?.spec).toMatchObject({ gpuCount: 2, gpuMemoryBytes: 20n * 2n ** 30n, gpuShared: true, gpuLayers: 0 });
    const offload = await ts.admin.createRuntimeProfile({
      name: "llama-all",
      engine: EngineKind.LLAMA_CPP,
      gpuLayersAll: true,
      gpuCount: 1,
    });
    expect(offload.profile?.spec).toMatchObject({ gpuLayersAll: true, gpuCount: 1, gpuShared: false });
    const listed = (await ts.admin.listRuntimeProfiles({})).profiles.find((p) => p.name === "llama-all");
    expect(listed?.spec?.contentHash).toBe(profileContentHash({ ...llama(), gpuLayersAll: true, gpuCount: 1 }));
  });

  it("stores parallel and batch size and resolves them into the spec; openai-http refuses them", async () => {
    const made = await ts.admin.createRuntimeProfile({ name: "batched", engine: EngineKind.LLAMA_CPP, parallel: 8, batchSize: 1024 });
    expect(made.profile?.spec).toMatchObject({ parallel: 8, batchSize: 1024 });
    expect(made.profile?.spec?.contentHash).toBe(profileContentHash({ ...llama(), parallel: 8, batchSize: 1024 }));
    await expect(
      ts.admin.createRuntimeProfile({ name: "remote-batched", engine: EngineKind.OPENAI_HTTP, parallel: 2 }),
    ).rejects.toMatchObject({
      code: Code.InvalidArgument,
      message: expect.stringContaining("parallel: only a llama.cpp profile"),
    });
    await expect(ts.admin.createRuntimeProfile({ name: "too-many", engine: EngineKind.LLAMA_CPP, parallel: 300 })).rejects.toMatchObject({
      code: Code.InvalidArgument,
      message: expect.stringContaining("parallel"),
    });
  });

  it("racing creators of one name end with one profile and one audit event", async () => {
    const req = { name: "race", engine: EngineKind.OPENAI_HTTP, contextSize: 0, threads: 0 };
    const results = await Promise.all(Array.from({ length: 8 }, () => ts.admin.createRuntimeProfile(req)));
    expect(results.filter((r) => r.created)).toHaveLength(1);
    const audit = await ts.admin.listAuditEvents({ action: "runtime_profile.created", targetId: "race" });
    expect(audit.events).toHaveLength(1);
  });

  it("lists by name, page by page", async () => {
    for (const n of ["p-c", "p-a", "p-b"]) await ts.admin.createRuntimeProfile({ name: n, engine: EngineKind.LLAMA_CPP });
    const names: string[] = [];
    let pageToken = "";
    do {
      const page = await ts.admin.listRuntimeProfiles({ pageSize: 2, pageToken });
      expect(page.profiles.length).toBeLessThanOrEqual(2);
      names.push(...page.profiles.map((p) => p.name));
      pageToken = page.nextPageToken;
    } while (pageToken !== "");
    expect(names).toEqual([...names].sort());
    expect(names).toEqual(expect.arrayContaining(["p-a", "p-b", "p-c", "gpu-8k", "race"]));
  });
});
