// The control plane's artifact store through its real RPCs and the real `forge artifacts` CLI:
// chunked pushes that resume and deduplicate by digest, many files pushed at once, the bound on a
// commit's files, refusals of bad pushes, listing, and deletes that free content only when no
// commit refers to it any more.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { spawn } from "node:child_process";
import { createHash, randomBytes } from "node:crypto";
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Code, ConnectError } from "@connectrpc/connect";
import { startTestServer, testAdminKey, type TestServer } from "../support/server.js";
import { repoRoot } from "../support/process.js";
import { MAX_COMMIT_FILES } from "../../common/artifacts.js";
import { tinyLlamaGguf } from "../../scripts/gguf.js";
import { memoryNeed } from "../../server/artifacts/memory.js";

let ts: TestServer;
let work: string;
let caFile: string;

const sha256 = (b: Buffer) => createHash("sha256").update(b).digest("hex");
const commitOf = (label: string) => createHash("sha1").update(label).digest("hex");
const repository = "acme/store-model";

function forge(args: string[]): Promise<{ code: number; stdout: string; stderr: string }> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, ["--import", "tsx", "cli/main.ts", ...args], {
      cwd: repoRoot,
      env: {
        PATH: process.env.PATH ?? "",
        HOME: process.env.HOME ?? "/tmp",
        MODELFORGE_SERVER: ts.url,
        MODELFORGE_CA_FILE: caFile,
        MODELFORGE_OPERATOR_API_KEY: testAdminKey,
      },
      stdio: ["ignore", "pipe", "pipe"],
    });
    let stdout = "";
    let stderr = "";
    child.stdout.on("data", (d: Buffer) => (stdout += d.toString()));
    child.stderr.on("data", (d: Buffer) => (stderr += d.toString()));
    child.on("error", reject);
    child.on("close", (code) => resolve({ code: code ?? -1, stdout, stderr }));
  });
}

async function codeOf(p: Promise<unknown>): Promise<Code | undefined> {
  return p.then(
    () => undefined,
    (e: unknown) => ConnectError.from(e).code,
  );
}

beforeAll(async () => {
  ts = await startTestServer();
  work = mkdtempSync(join(tmpdir(), "mf-store-"));
  caFile = join(work, "ca.crt");
  writeFileSync(caFile, ts.caPem);
}, 60_000);
afterAll(async () => {
  await ts?.stop();
  if (work) rmSync(work, { recursive: true, force: true });
});

describe("forge artifacts", () => {
  it("estimates a GGUF's memory from its header at push, and shows it; other files have none", async () => {
    const dir = join(work, "estimated");
    mkdirSync(dir, { recursive: true });
    writeFileSync(join(dir, "tiny.gguf"), tinyLlamaGguf().bytes);
    writeFileSync(join(dir, "notes.gguf"), "not a model");
    const commit = commitOf("estimate");
    expect((await forge(["artifacts", "push", dir, "--repository", repository, "--commit", commit])).code).toBe(0);

    const listed = await forge(["artifacts", "list", "--repository", repository, "--commit", commit, "--json"]);
    const files = (JSON.parse(listed.stdout) as { files: { path: string; memoryEstimate?: { [k: string]: unknown } }[] }).files;
    // The tiny model: f32 tensors, 2 layers of 4 heads 16 wide (KV 512 B a token), 1024 tokens.
    const weightsBytes = (2 * 64 * 99 + 64 + 2 * (64 + 4 * 64 * 64 + 64 + 3 * 64 * 128)) * 4;
    const need = memoryNeed({ weightsBytes, kvBytesPerToken: 512, contextLength: 1024 }, 0);
    expect(files).toEqual(
      [
        { path: "notes.gguf", sizeBytes: "11", sha256: expect.any(String), createdAt: expect.any(String) },
        {
          path: "tiny.gguf",
          sizeBytes: expect.any(String),
          sha256: expect.any(String),
          createdAt: expect.any(String),
          memoryEstimate: {
            weightsBytes: String(weightsBytes),
            kvCacheBytesPerToken: "512",
            contextLength: 1024,
            estimatedBytes: String(need),
          },
        },
      ].map((f) => ({ repository, commit, ...f })),
    );
    const table = await forge(["artifacts", "list", "--repository", repository, "--commit", commit]);
    expect(table.stdout).toMatch(/EST\. MEMORY/);
    expect(table.stdout).toMatch(/tiny\.gguf\s+374 KiB\s+256 MiB\s/);

    // A file stored before estimates existed (none in its row) gets one when pushed again.
    const where = { repository, commit, path: "tiny.gguf" };
    await ts.server.db.prisma.storedArtifact.updateMany({
      where,
      data: { estimatedWeightsBytes: null, estimatedKvBytesPerToken: null, estimatedContextLength: null },
    });
    expect((await forge(["artifacts", "push", dir, "--repository", repository, "--commit", commit])).stdout).toContain("present tiny.gguf");
    const row = await ts.server.db.prisma.storedArtifact.findFirstOrThrow({ where });
    expect(row.estimatedWeightsBytes).toBe(BigInt(weightsBytes));
    await forge(["artifacts", "delete", "--repository", repository, "--commit", commit]);
  });

  it("pushes a directory, lists it, skips what is stored, and deletes it", async () => {
    const dir = join(work, "snapshot");
    mkdirSync(join(dir, "tokenizer"), { recursive: true });
    mkdirSync(join(dir, ".git"), { recursive: true });
    const big = randomBytes(2_600_000); // three chunks
    writeFileSync(join(dir, "model.gguf"), big);
    writeFileSync(join(dir, "tokenizer", "vocab.json"), "{}");
    writeFileSync(join(dir, ".git", "HEAD"), "ref: refs/heads/main\n");
    const commit = commitOf("cli");

    const pushed = await forge(["artifacts", "push", dir, "--repository", repository, "--commit", commit]);
    expect(pushed.stderr).toBe("skipped .git (git metadata)\n");
    expect(pushed.code).toBe(0);
    expect(pushed.stdout).toContain(`pushed  model.gguf`);
    expect(pushed.stdout).toContain(`sha256:${sha256(big)}`);

    const listed = await forge(["artifacts", "list", "--repository", repository, "--commit", commit, "--json"]);
    expect(listed.code).toBe(0);
    const files = (JSON.parse(listed.stdout) as { files: { path: string; sizeBytes: string; sha256: string }[] }).files;
    expect(files.map((f) => [f.path, f.sizeBytes, f.sha256])).toEqual([
      ["model.gguf", String(big.length), sha256(big)],
      ["tokenizer/vocab.json", "2", sha256(Buffer.from("{}"))],
    ]);

    const again = await forge(["artifacts", "push", dir, "--repository", repository, "--commit", commit]);
    expect(again.code).toBe(0);
    expect(again.stdout).toContain("present model.gguf");
    expect(again.stdout).toContain("(0 B sent)");

    const deleted = await forge(["artifacts", "delete", "--repository", repository, "--commit", commit]);
    expect(deleted.code).toBe(0);
    expect(deleted.stdout).toMatch(/^Deleted 2 files/);
    const empty = await forge(["artifacts", "list", "--repository", repository, "--commit", commit]);
    expect(empty.stdout).toBe("No artifact files stored.\n");
    const missing = await forge(["artifacts", "delete", "--repository", repository, "--commit", commit]);
    expect(missing.code).toBe(1);
    expect(missing.stderr).toContain("not_found");
  });

  it("pushes many files at once and stores every one complete and correct, reported in order", async () => {
    const dir = join(work, "many");
    mkdirSync(join(dir, "shards"), { recursive: true });
    const expected = new Map<string, Buffer>();
    for (let i = 0; i < 600; i++) {
      // Every 50th file repeats an earlier one's content: one digest pushed under two names.
      const content = i % 50 === 49 ? expected.get(`shards/s${String(i - 1).padStart(3, "0")}.bin`)! : randomBytes(64 + (i % 400));
      const path = `shards/s${String(i).padStart(3, "0")}.bin`;
      writeFileSync(join(dir, path), content);
      expected.set(path, content);
    }
    const big = randomBytes(2_200_000); // several chunks, pushed beside the small files
    writeFileSync(join(dir, "model.gguf"), big);
    expected.set("model.gguf", big);
    const commit = commitOf("many");

    const pushed = await forge(["artifacts", "push", dir, "--repository", repository, "--commit", commit]);
    expect(pushed.stderr).toBe("");
    expect(pushed.code).toBe(0);
    const lines = pushed.stdout.trimEnd().split("\n");
    expect(lines.map((l) => l.split(/\s+/)[1])).toEqual([...[...expected.keys()].sort((a, b) => a.localeCompare(b)), "files"]);
    expect(lines.at(-1)).toMatch(/^601 files stored for /);

    const stored = new Map<string, { sizeBytes: bigint; sha256: string }>();
    let pageToken = "";
    do {
      const page = await ts.admin.listArtifactFiles({ repository, commit, pageSize: 100, pageToken });
      for (const f of page.files) stored.set(f.path, f);
      pageToken = page.nextPageToken;
    } while (pageToken !== "");
    expect([...stored.keys()].sort()).toEqual([...expected.keys()].sort());
    for (const [path, content] of expected) {
      const digest = sha256(content);
      expect(stored.get(path)).toMatchObject({ sizeBytes: BigInt(content.length), sha256: digest });
      expect(readFileSync(join(ts.config.artifactDir, "blobs", digest.slice(0, 2), digest)).equals(content)).toBe(true);
    }
  });

  it(`refuses a directory of more files than a commit holds (${MAX_COMMIT_FILES}) before sending any`, async () => {
    const dir = join(work, "too-many");
    mkdirSync(dir, { recursive: true });
    for (let i = 0; i <= MAX_COMMIT_FILES; i++) writeFileSync(join(dir, `f${i}`), String(i));
    const commit = commitOf("too-many");
    const r = await forge(["artifacts", "push", dir, "--repository", repository, "--commit", commit]);
    expect(r.code).toBe(2);
    expect(r.stderr).toContain(`holds ${MAX_COMMIT_FILES + 1} files; a commit holds at most ${MAX_COMMIT_FILES}`);
    expect((await ts.admin.listArtifactFiles({ repository, commit })).files).toEqual([]);
  });

  it("refuses to push through a symlink", async () => {
    const dir = join(work, "linked");
    mkdirSync(dir, { recursive: true });
    symlinkSync("/etc/passwd", join(dir, "passwd"));
    const r = await forge(["artifacts", "push", dir, "--repository", repository, "--commit", commitOf("link")]);
    expect(r.code).toBe(2);
    expect(r.stderr).toContain("symlink");
  });
});

describe("UploadArtifactChunk, ListArtifactFiles, DeleteArtifactFiles", () => {
  const base = (content: Buffer, commit: string, path = "w.bin") => ({
    repository,
    commit,
    path,
    sizeBytes: BigInt(content.length),
    sha256: sha256(content),
  });

  it("resumes an interrupted push from what the store holds, and refuses a gap", async () => {
    const content = randomBytes(1_500_000);
    const commit = commitOf("resume");
    const first = await ts.admin.uploadArtifactChunk({ ...base(content, commit), offset: 0n, data: content.subarray(0, 1_000_000) });
    expect(first).toMatchObject({ receivedBytes: 1_000_000n, complete: false });
    // A client that lost track asks with an empty chunk.
    expect((await ts.admin.uploadArtifactChunk({ ...base(content, commit), offset: 0n })).receivedBytes).toBe(1_000_000n);
    expect(
      await codeOf(ts.admin.uploadArtifactChunk({ ...base(content, commit), offset: 1_200_000n, data: content.subarray(1_200_000) })),
    ).toBe(Code.Aborted);
    const done = await ts.admin.uploadArtifactChunk({ ...base(content, commit), offset: 1_000_000n, data: content.subarray(1_000_000) });
    expect(done).toMatchObject({ receivedBytes: 1_500_000n, complete: true });
    expect(done.file).toMatchObject({ repository, commit, path: "w.bin", sha256: sha256(content) });
  });

  it("refuses bad pushes with typed errors", async () => {
    const content = randomBytes(1000);
    const commit = commitOf("bad");
    const wrong = Buffer.from(content);
    wrong[10] = wrong[10]! ^ 1;
    expect(await codeOf(ts.admin.uploadArtifactChunk({ ...base(content, commit), offset: 0n, data: wrong }))).toBe(Code.InvalidArgument);
    for (const path of ["../x", "/abs", "a//b"]) {
      expect(await codeOf(ts.admin.uploadArtifactChunk({ ...base(content, commit, path), offset: 0n, data: content }))).toBe(
        Code.InvalidArgument,
      );
    }
    expect(await codeOf(ts.admin.uploadArtifactChunk({ ...base(content, "main"), offset: 0n, data: content }))).toBe(Code.InvalidArgument);
    const huge = randomBytes(1024 * 1024 + 1);
    expect(await codeOf(ts.admin.uploadArtifactChunk({ ...base(huge, commit, "huge"), offset: 0n, data: huge }))).toBe(
      Code.InvalidArgument,
    );
    // A stored name never changes content.
    await ts.admin.uploadArtifactChunk({ ...base(content, commit), offset: 0n, data: content });
    const other = randomBytes(1000);
    expect(await codeOf(ts.admin.uploadArtifactChunk({ ...base(other, commit), offset: 0n, data: other }))).toBe(Code.AlreadyExists);
  });

  it(`refuses a file that would make a commit hold more than ${MAX_COMMIT_FILES}, at its first chunk`, async () => {
    const commit = commitOf("full");
    const content = randomBytes(100);
    const digest = sha256(content);
    // The commit already holds all but one file (written straight to the index: the store's own
    // push path is what is under test, not the setup).
    await ts.server.db.prisma.storedArtifact.createMany({
      data: Array.from({ length: MAX_COMMIT_FILES - 1 }, (_, i) => ({
        repository,
        commit,
        path: `held/${i}`,
        sizeBytes: BigInt(content.length),
        sha256: digest,
      })),
    });
    const last = await ts.admin.uploadArtifactChunk({ ...base(content, commit, "last.bin"), offset: 0n, data: content });
    expect(last).toMatchObject({ complete: true });
    for (const probe of [{}, { data: content }]) {
      const err = await ts.admin
        .uploadArtifactChunk({ ...base(content, commit, "one-more.bin"), offset: 0n, ...probe })
        .catch((e: unknown) => ConnectError.from(e));
      expect(err).toBeInstanceOf(ConnectError);
      expect((err as ConnectError).code).toBe(Code.InvalidArgument);
      expect((err as ConnectError).rawMessage).toContain(`a commit holds at most ${MAX_COMMIT_FILES}`);
    }
    // A file the commit already holds is still answered: pushing a commit again stays possible.
    expect(await ts.admin.uploadArtifactChunk({ ...base(content, commit, "last.bin"), offset: 0n })).toMatchObject({ complete: true });
    expect(await ts.server.db.prisma.storedArtifact.count({ where: { repository, commit } })).toBe(MAX_COMMIT_FILES);
  });

  it("stores shared content once and frees it only when the last name is deleted", async () => {
    const content = randomBytes(50_000);
    const [c1, c2] = [commitOf("share-1"), commitOf("share-2")];
    await ts.admin.uploadArtifactChunk({ ...base(content, c1), offset: 0n, data: content });
    // The second commit's push is complete from the probe alone: no bytes travel.
    expect(await ts.admin.uploadArtifactChunk({ ...base(content, c2), offset: 0n })).toMatchObject({ complete: true });
    const blob = join(ts.config.artifactDir, "blobs", sha256(content).slice(0, 2), sha256(content));
    expect(existsSync(blob)).toBe(true);
    expect(await ts.admin.deleteArtifactFiles({ repository, commit: c1 })).toMatchObject({ deletedFiles: 1, freedBytes: 0n });
    expect(existsSync(blob)).toBe(true);
    expect(await ts.admin.deleteArtifactFiles({ repository, commit: c2, path: "w.bin" })).toMatchObject({
      deletedFiles: 1,
      freedBytes: 50_000n,
    });
    expect(existsSync(blob)).toBe(false);
    expect(await codeOf(ts.admin.deleteArtifactFiles({ repository, commit: c2 }))).toBe(Code.NotFound);
    expect((await ts.admin.listArtifactFiles({ repository, commit: c2 })).files).toEqual([]);
  });
});
