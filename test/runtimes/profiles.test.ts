// Runtime profiles: the pure rules (name grammar, bounds, canonical hash) as a table, and the
// store's immutability through a real server: idempotent create, conflict on other content,
// racing creators, paging and the audit trail.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { Code } from "@connectrpc/connect";
import { EngineKind } from "../../gen/proto/modelforge/jobs/v1/jobs_pb.js";
import {
  checkProfileContent,
  checkProfileName,
  profileContentHash,
  ProfileRuleError,
  type ProfileContent,
} from "../../server/runtimes/profile.js";
import { startTestServer, type TestServer } from "../support/server.js";

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
    ] as const) {
      await expect(ts.admin.createRuntimeProfile(req)).rejects.toMatchObject({
        code: Code.InvalidArgument,
        message: expect.stringContaining(field),
      });
    }
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
