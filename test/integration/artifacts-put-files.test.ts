// PutArtifactFiles through the real TLS server and the real `forge artifacts push`: many small
// files sent whole in batches beside a large one streamed, stored byte-exact and verified; a batch
// with one bad file refused whole, naming the file, storing nothing of it; the bounds of a call;
// pushing again answered as stored without a byte sent.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createHash, randomBytes } from "node:crypto";
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Code, ConnectError } from "@connectrpc/connect";
import { startTestServer, testAdminKey, type TestServer } from "../support/server.js";
import { forgeAt, type ForgeRun } from "../support/forge.js";
import { MAX_COMMIT_FILES, MAX_PUT_DATA_BYTES } from "../../common/artifacts.js";
import { formatBytes } from "../../cli/format.js";

let ts: TestServer;
let work: string;
let forge: (args: string[]) => Promise<ForgeRun>;

const sha256 = (b: Uint8Array) => createHash("sha256").update(b).digest("hex");
const commitOf = (label: string) => createHash("sha1").update(label).digest("hex");
const repository = "acme/batched";
const whole = (path: string, data: Buffer) => ({ path, sizeBytes: BigInt(data.length), sha256: sha256(data), data });
const asked = (path: string, data: Buffer) => ({ path, sizeBytes: BigInt(data.length), sha256: sha256(data) });
const blobPath = (digest: string) => join(ts.config.artifactDir, "blobs", digest.slice(0, 2), digest);

async function refusal(p: Promise<unknown>): Promise<{ code: Code; message: string } | undefined> {
  return p.then(
    () => undefined,
    (e: unknown) => ({ code: ConnectError.from(e).code, message: ConnectError.from(e).rawMessage }),
  );
}

const storedCount = (commit: string) => ts.server.db.prisma.storedArtifact.count({ where: { repository, commit } });
const auditCount = (commit: string) =>
  ts.server.db.prisma.auditEvent.count({ where: { action: "artifact.stored", targetId: `${repository}@${commit}` } });

beforeAll(async () => {
  ts = await startTestServer();
  work = mkdtempSync(join(tmpdir(), "mf-put-files-"));
  forge = forgeAt(ts.url, ts.caPem, work, testAdminKey);
}, 60_000);
afterAll(async () => {
  await ts?.stop();
  if (work) rmSync(work, { recursive: true, force: true });
});

describe("forge artifacts push in batches", () => {
  it("stores many small files and a large one byte-exact, and a second push sends nothing", async () => {
    const dir = join(work, "commit");
    mkdirSync(join(dir, "shards"), { recursive: true });
    const expected = new Map<string, Buffer>();
    for (let i = 0; i < 450; i++) expected.set(`shards/s${String(i).padStart(3, "0")}.bin`, randomBytes(1 + (i % 3000)));
    expected.set("shards/copy.bin", expected.get("shards/s007.bin")!); // one content under two names
    expected.set("medium.bin", randomBytes(300_000)); // over the CLI's small-file size, one chunk
    expected.set("model.gguf", randomBytes(2_500_000)); // streamed in three chunks
    for (const [path, content] of expected) writeFileSync(join(dir, path), content);
    const commit = commitOf("batched");

    const pushed = await forge(["artifacts", "push", dir, "--repository", repository, "--commit", commit]);
    expect(pushed.stderr).toBe("");
    expect(pushed.code).toBe(0);
    const total = [...expected.entries()].filter(([p]) => p !== "shards/copy.bin").reduce((n, [, c]) => n + c.length, 0);
    expect(pushed.stdout.trimEnd().split("\n").at(-1)).toBe(
      `${expected.size} files stored for ${repository}@${commit} (${formatBytes(total)} sent).`,
    );

    const rows = await ts.server.db.prisma.storedArtifact.findMany({ where: { repository, commit } });
    expect(rows.map((r) => r.path).sort()).toEqual([...expected.keys()].sort());
    for (const row of rows) {
      const content = expected.get(row.path)!;
      expect([row.sizeBytes, row.sha256]).toEqual([BigInt(content.length), sha256(content)]);
      expect(readFileSync(blobPath(row.sha256)).equals(content)).toBe(true);
    }
    expect(await auditCount(commit)).toBe(expected.size);

    const again = await forge(["artifacts", "push", dir, "--repository", repository, "--commit", commit]);
    expect(again.code).toBe(0);
    expect(again.stdout).not.toMatch(/^pushed/m);
    expect(again.stdout).toContain("(0 B sent)");
    expect(await storedCount(commit)).toBe(expected.size);
    expect(await auditCount(commit)).toBe(expected.size);
  });

  it("resumes a large file an interrupted push left half stored, sending only the rest", async () => {
    const dir = join(work, "resumed");
    mkdirSync(dir, { recursive: true });
    const big = randomBytes(2_500_000);
    const small = randomBytes(100);
    writeFileSync(join(dir, "model.bin"), big);
    writeFileSync(join(dir, "config.json"), small);
    const commit = commitOf("resumed");
    await ts.admin.uploadArtifactChunk({ repository, commit, ...asked("model.bin", big), offset: 0n, data: big.subarray(0, 1_048_576) });

    const pushed = await forge(["artifacts", "push", dir, "--repository", repository, "--commit", commit]);
    expect(pushed.code).toBe(0);
    expect(pushed.stdout).toContain(`(${formatBytes(big.length - 1_048_576 + small.length)} sent)`);
    expect(readFileSync(blobPath(sha256(big))).equals(big)).toBe(true);
    expect(await storedCount(commit)).toBe(2);
  });
});

describe("PutArtifactFiles", () => {
  it("refuses a batch with one bad file, naming it, and stores nothing of the batch", async () => {
    const commit = commitOf("bad-batch");
    const good = [randomBytes(100), randomBytes(200)];
    const bad = randomBytes(300);
    const wrong = Buffer.from(bad);
    wrong[0] = wrong[0]! ^ 1;
    const cases: [string, object, Code, string][] = [
      [
        "wrong digest",
        { ...whole("bad.bin", bad), data: wrong },
        Code.InvalidArgument,
        'files[2] "bad.bin": the data does not match sha256',
      ],
      ["a path out of the commit", whole("../bad.bin", bad), Code.InvalidArgument, 'files[2] "../bad.bin" path: '],
      ["a control character in its path", whole("bad\u0007.bin", bad), Code.InvalidArgument, "files[2].path: contains a control character"],
      [
        "data short of its size",
        { ...whole("bad.bin", bad), sizeBytes: 301n },
        Code.InvalidArgument,
        'files[2] "bad.bin" data: is 300 bytes, not size_bytes 301',
      ],
      [
        "a file over the data bound",
        whole("bad.bin", randomBytes(MAX_PUT_DATA_BYTES + 1)),
        Code.InvalidArgument,
        "files[2].data: is longer than",
      ],
    ];
    for (const [label, badFile, code, message] of cases) {
      const files = [whole("a.bin", good[0]!), whole("b.bin", good[1]!), badFile];
      expect(await refusal(ts.admin.putArtifactFiles({ repository, commit, files })), label).toEqual({
        code,
        message: expect.stringContaining(message),
      });
    }
    expect(await storedCount(commit)).toBe(0);
    // Verified before anything was written: not even the good files' content was kept.
    for (const content of good) expect(existsSync(blobPath(sha256(content)))).toBe(false);

    // A name already stored with other content: the whole batch is refused, the stored file kept.
    const first = randomBytes(50);
    await ts.admin.putArtifactFiles({ repository, commit, files: [whole("bad.bin", first)] });
    const clash = await refusal(
      ts.admin.putArtifactFiles({ repository, commit, files: [whole("a.bin", good[0]!), whole("bad.bin", bad)] }),
    );
    expect(clash).toEqual({ code: Code.AlreadyExists, message: expect.stringContaining('files[1] "bad.bin": ') });
    const rows = await ts.server.db.prisma.storedArtifact.findMany({ where: { repository, commit } });
    expect(rows.map((r) => [r.path, r.sha256])).toEqual([["bad.bin", sha256(first)]]);
  });

  it("refuses calls beyond its bounds clearly", async () => {
    const commit = commitOf("bounds");
    const one = randomBytes(10);
    const tooMany = Array.from({ length: MAX_COMMIT_FILES + 1 }, (_, i) => asked(`f${i}`, one));
    expect(await refusal(ts.admin.putArtifactFiles({ repository, commit, files: tooMany }))).toEqual({
      code: Code.InvalidArgument,
      message: expect.stringContaining(`files: has ${MAX_COMMIT_FILES + 1} entries; at most ${MAX_COMMIT_FILES}`),
    });
    expect(await refusal(ts.admin.putArtifactFiles({ repository, commit, files: [] }))).toEqual({
      code: Code.InvalidArgument,
      message: expect.stringContaining("files: is empty"),
    });
    const half = MAX_PUT_DATA_BYTES / 2;
    const heavy = [whole("x", randomBytes(half)), whole("y", randomBytes(half + 1))];
    expect(await refusal(ts.admin.putArtifactFiles({ repository, commit, files: heavy }))).toEqual({
      code: Code.InvalidArgument,
      message: expect.stringContaining(`files: carry ${MAX_PUT_DATA_BYTES + 1} bytes of data; at most ${MAX_PUT_DATA_BYTES} per call`),
    });
    expect(await refusal(ts.admin.putArtifactFiles({ repository, commit: "main", files: [whole("x", one)] }))).toMatchObject({
      code: Code.InvalidArgument,
    });
    expect(await storedCount(commit)).toBe(0);

    // A commit with room for one more file takes none of a batch of two new ones.
    await ts.server.db.prisma.storedArtifact.createMany({
      data: Array.from({ length: MAX_COMMIT_FILES - 1 }, (_, i) => ({
        repository,
        commit,
        path: `held/${i}`,
        sizeBytes: 10n,
        sha256: sha256(one),
      })),
    });
    const full = await refusal(
      ts.admin.putArtifactFiles({ repository, commit, files: [whole("new-1", randomBytes(5)), whole("new-2", randomBytes(5))] }),
    );
    expect(full).toEqual({ code: Code.InvalidArgument, message: expect.stringContaining(`a commit holds at most ${MAX_COMMIT_FILES}`) });
    expect(await storedCount(commit)).toBe(MAX_COMMIT_FILES - 1);
  });

  it("answers a batch pushed again as stored, and tells a probe what the store holds", async () => {
    const commit = commitOf("again");
    const files = [whole("a.bin", randomBytes(1000)), whole("b.bin", randomBytes(2000))];
    const first = await ts.admin.putArtifactFiles({ repository, commit, files });
    expect(first.files.map((f) => [f.complete, f.file?.path])).toEqual([
      [true, "a.bin"],
      [true, "b.bin"],
    ]);
    const again = await ts.admin.putArtifactFiles({ repository, commit, files });
    expect(again.files.map((f) => f.file?.createdAt)).toEqual(first.files.map((f) => f.file?.createdAt));
    expect(await storedCount(commit)).toBe(2);
    expect(await auditCount(commit)).toBe(2);

    // Asked without data: content held elsewhere is recorded under the new name at once; content
    // half pushed in chunks is answered with what is held, for the push to resume there.
    const half = randomBytes(1_500_000);
    await ts.admin.uploadArtifactChunk({ ...asked("half.bin", half), commit, repository, offset: 0n, data: half.subarray(0, 1_000_000) });
    const unknown = randomBytes(10);
    const probe = await ts.admin.putArtifactFiles({
      repository,
      commit: commitOf("again-2"),
      files: [asked("copy.bin", files[0]!.data), asked("half.bin", half), asked("new.bin", unknown)],
    });
    expect(probe.files.map((f) => [f.complete, f.receivedBytes, f.file?.sha256])).toEqual([
      [true, 1000n, files[0]!.sha256],
      [false, 1_000_000n, undefined],
      [false, 0n, undefined],
    ]);
    expect(await ts.server.db.prisma.storedArtifact.count({ where: { repository, commit: commitOf("again-2") } })).toBe(1);
  });
});
