// artifact.acquire.v1 end to end: a real control plane, a real agent process configured with a
// loopback HTTP mirror and the control plane's own store as sources, real files in a temp target
// root. Covers the happy paths from both sources, a corrupted byte, a short file, the disk reserve,
// cancel mid-download, resume after a dropped connection and a file already present; and, calling
// the handler directly with hand-made leases, hostile paths the server never let through.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createHash, randomBytes } from "node:crypto";
import { existsSync, mkdirSync, mkdtempSync, readFileSync, readdirSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import http from "node:http";
import type { AddressInfo } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { pino } from "pino";
import { create, type MessageInitShape } from "@bufbuild/protobuf";
import { Code, ConnectError } from "@connectrpc/connect";
import { JobState } from "../../gen/proto/modelforge/admin/v1/admin_pb.js";
import {
  JobFailureCode,
  JobSpecSchema,
  type ArtifactFileSchema,
  type DiskReservePolicySchema,
} from "../../gen/proto/modelforge/jobs/v1/jobs_pb.js";
import { JobFailureError, type JobAttempt } from "../../agent/jobs/registry.js";
import { artifactAcquireHandler, STAGING_DIR } from "../../agent/capabilities/artifact-acquire.js";
import { MirrorSource } from "../../agent/capabilities/artifact-sources.js";
import { startTestServer, type TestServer } from "../support/server.js";
import { enrollTestNode, eventually, type TestNode } from "../support/node.js";
import { spawnAgent, type AgentProcess } from "../support/process.js";
import { startMirror, type Mirror, type MirrorFlow } from "../support/mirror.js";
import { waitFor } from "../support/wait.js";

type FileInit = MessageInitShape<typeof ArtifactFileSchema>;
type ReserveInit = MessageInitShape<typeof DiskReservePolicySchema>;

const repository = "acme/tiny-model";
let ts: TestServer;
let mirror: Mirror;
let root: string;
let node: TestNode;
let agent: AgentProcess;

const sha256 = (b: Buffer) => createHash("sha256").update(b).digest("hex");
const commitOf = (label: string) => createHash("sha1").update(label).digest("hex");
const fileOf = (path: string, content: Buffer): FileInit => ({ path, sizeBytes: BigInt(content.length), sha256: sha256(content) });
const spec = (commit: string, files: FileInit[], reserve?: ReserveInit): MessageInitShape<typeof JobSpecSchema> => ({
  kind: { case: "artifactAcquire", value: { repository, commit, files, targetRoot: root, ...(reserve ? { reserve } : {}) } },
});
const requestsFor = (commit: string) => mirror.requests.filter((r) => r.path.includes(`/${commit}/`));

async function run(commit: string, files: FileInit[], reserve?: ReserveInit) {
  const { job } = await ts.admin.createJob({ nodeId: node.nodeId, spec: spec(commit, files, reserve), maxAttempts: 3 });
  return job!.id;
}
async function finished(jobId: string) {
  return eventually(
    async () => {
      const job = (await ts.admin.getJob({ jobId })).job!;
      return [JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELLED].includes(job.state) ? job : undefined;
    },
    30_000,
    `job ${jobId} to finish`,
  );
}

beforeAll(async () => {
  root = mkdtempSync(join(tmpdir(), "mf-artifacts-root-"));
  mirror = await startMirror();
  ts = await startTestServer({
    MODELFORGE_HEARTBEAT_INTERVAL: "200ms",
    MODELFORGE_STALE_AFTER: "2s",
    MODELFORGE_OFFLINE_AFTER: "4s",
    MODELFORGE_LEASE_DURATION: "10s",
    MODELFORGE_APPROVED_ROOTS: root,
  });
  node = await enrollTestNode(ts, "gpu-artifacts");
  agent = spawnAgent(node.statePath, {
    MODELFORGE_AGENT_ARTIFACT_SOURCES: `${mirror.url}, control-plane`,
    MODELFORGE_AGENT_ARTIFACT_ROOTS: root,
    MODELFORGE_AGENT_LOG_LEVEL: "debug",
  });
  await eventually(
    async () => {
      const n = (await ts.admin.getNode({ nodeId: node.nodeId })).node!;
      return n.connected && n.capabilities.includes("artifact.acquire.v1");
    },
    30_000,
    "the agent process online, advertising artifact.acquire.v1",
  );
}, 60_000);

afterAll(async () => {
  await agent?.stop();
  await ts?.stop();
  await mirror?.close();
  if (root) rmSync(root, { recursive: true, force: true });
});

describe("artifact.acquire.v1 through a real server and agent process", () => {
  it("acquires from the mirror into <root>/<repository>/<commit>/, verified, and reports the inventory", async () => {
    const commit = commitOf("mirror-happy");
    const a = randomBytes(300_000);
    const b = randomBytes(1234);
    mirror.put(repository, commit, "model.gguf", { content: a });
    mirror.put(repository, commit, "tokenizer/vocab.json", { content: b });
    const job = await finished(await run(commit, [fileOf("model.gguf", a), fileOf("tokenizer/vocab.json", b)]));
    expect(job.state, JSON.stringify(job.failure)).toBe(JobState.SUCCEEDED);
    const dir = join(root, repository, commit);
    expect(readFileSync(join(dir, "model.gguf")).equals(a)).toBe(true);
    expect(readFileSync(join(dir, "tokenizer/vocab.json")).equals(b)).toBe(true);
    const result = job.result!.result;
    expect(result.case).toBe("artifactAcquire");
    if (result.case !== "artifactAcquire") return;
    expect(result.value.path).toBe(dir);
    expect(result.value.source).toBe(`mirror:${new URL(mirror.url).host}`);
    expect(result.value.bytesWritten).toBe(BigInt(a.length + b.length));
    expect(result.value.files.map((f) => [f.path, f.sizeBytes, f.sha256])).toEqual([
      ["model.gguf", BigInt(a.length), sha256(a)],
      ["tokenizer/vocab.json", BigInt(b.length), sha256(b)],
    ]);
    // Staging is gone once promoted.
    expect(readdirSync(join(root, STAGING_DIR))).toEqual([]);

    // The same commit again with one more file: only the new file is fetched.
    const c = randomBytes(777);
    mirror.put(repository, commit, "config.json", { content: c });
    const before = requestsFor(commit).length;
    const again = await finished(await run(commit, [fileOf("model.gguf", a), fileOf("tokenizer/vocab.json", b), fileOf("config.json", c)]));
    expect(again.state, JSON.stringify(again.failure)).toBe(JobState.SUCCEEDED);
    expect(
      requestsFor(commit)
        .slice(before)
        .map((r) => r.path),
    ).toEqual([`/${repository}/resolve/${commit}/config.json`]);
    const value = again.result!.result.value as { bytesReused: bigint; bytesWritten: bigint };
    expect(value.bytesReused).toBe(BigInt(a.length + b.length));
    expect(value.bytesWritten).toBe(BigInt(c.length));
    expect(readFileSync(join(dir, "config.json")).equals(c)).toBe(true);
  });

  it("acquires from the control plane's store when the mirror lacks the commit", async () => {
    const commit = commitOf("control-plane-happy");
    const content = randomBytes(2_500_000); // several download chunks
    const pushed = await ts.admin.uploadArtifactChunk({
      repository,
      commit,
      path: "weights.bin",
      sizeBytes: BigInt(content.length),
      sha256: sha256(content),
      offset: 0n,
    });
    let offset = Number(pushed.receivedBytes);
    while (offset < content.length) {
      const data = content.subarray(offset, offset + 1024 * 1024);
      offset = Number(
        (
          await ts.admin.uploadArtifactChunk({
            repository,
            commit,
            path: "weights.bin",
            sizeBytes: BigInt(content.length),
            sha256: sha256(content),
            offset: BigInt(offset),
            data,
          })
        ).receivedBytes,
      );
    }
    const job = await finished(await run(commit, [fileOf("weights.bin", content)]));
    expect(job.state, JSON.stringify(job.failure)).toBe(JobState.SUCCEEDED);
    expect(job.result!.result.value).toMatchObject({ source: "control-plane", path: join(root, repository, commit) });
    expect(readFileSync(join(root, repository, commit, "weights.bin")).equals(content)).toBe(true);
    expect(requestsFor(commit).length).toBe(1); // the mirror was asked first and said 404

    // Outside a lease naming it, the node may not download the file.
    const client = await node.client();
    const err = await (async () => {
      for await (const _ of client.downloadArtifactFile({ repository, commit, path: "weights.bin", offset: 0n })) void _;
    })().then(
      () => undefined,
      (e: unknown) => ConnectError.from(e),
    );
    expect(err?.code).toBe(Code.PermissionDenied);
  });

  it("fails CHECKSUM_MISMATCH on a corrupted byte and keeps nothing", async () => {
    const commit = commitOf("corrupt");
    const content = randomBytes(200_000);
    mirror.put(repository, commit, "model.bin", { content, corruptAt: 123_456 });
    const job = await finished(await run(commit, [fileOf("model.bin", content)]));
    expect(job.state).toBe(JobState.FAILED);
    expect(job.failure).toMatchObject({ code: JobFailureCode.CHECKSUM_MISMATCH, retryable: false });
    expect(existsSync(join(root, repository, commit))).toBe(false);
    expect(existsSync(join(root, STAGING_DIR, job.id, "model.bin"))).toBe(false);
  });

  it("fails SIZE_MISMATCH on a short file", async () => {
    const commit = commitOf("short");
    const content = randomBytes(100_000);
    mirror.put(repository, commit, "model.bin", { content, truncateTo: 60_000 });
    const job = await finished(await run(commit, [fileOf("model.bin", content)]));
    expect(job.state).toBe(JobState.FAILED);
    expect(job.failure).toMatchObject({ code: JobFailureCode.SIZE_MISMATCH, retryable: false });
    expect(existsSync(join(root, repository, commit))).toBe(false);
  });

  it("refuses with INSUFFICIENT_DISK before fetching when the reserve cannot be kept", async () => {
    const commit = commitOf("reserve");
    const content = randomBytes(1000);
    mirror.put(repository, commit, "model.bin", { content });
    const job = await finished(await run(commit, [fileOf("model.bin", content)], { minFreeBytes: 2n ** 60n }));
    expect(job.state).toBe(JobState.FAILED);
    expect(job.failure).toMatchObject({ code: JobFailureCode.INSUFFICIENT_DISK, retryable: false });
    expect(requestsFor(commit)).toEqual([]);
    const percent = await finished(await run(commit, [fileOf("model.bin", content)], { minFreePercent: 100 }));
    expect(percent.failure?.code).toBe(JobFailureCode.INSUFFICIENT_DISK);
    expect(requestsFor(commit)).toEqual([]);
  });

  it("removes the staging directory when cancelled mid-download", async () => {
    const commit = commitOf("cancel");
    const content = randomBytes(8 * 1024 * 1024);
    mirror.put(repository, commit, "model.bin", { content, delayMs: 40 }); // ~1.6 MiB/s: minutes
    const jobId = await run(commit, [fileOf("model.bin", content)]);
    const staged = join(root, STAGING_DIR, jobId, "model.bin");
    await eventually(() => existsSync(staged) && readFileSync(staged).length > 0, 20_000, "bytes staged");
    // Progress reaches the server in bytes.
    const progress = await eventually(
      async () => {
        const p = (await ts.admin.getJob({ jobId })).job!.progress;
        return p !== undefined && p.bytesDone > 0n ? p : undefined;
      },
      20_000,
      "progress in bytes",
    );
    expect(progress.bytesTotal).toBe(BigInt(content.length));
    expect(progress.bytesDone).toBeLessThan(BigInt(content.length));
    await ts.admin.cancelJob({ jobId, reason: "test cancels" });
    const job = await finished(jobId);
    expect(job.state).toBe(JobState.CANCELLED);
    await eventually(() => !existsSync(join(root, STAGING_DIR, jobId)), 10_000, "staging removed");
    expect(existsSync(join(root, repository, commit))).toBe(false);
  });

  it("resumes with Range after the connection drops halfway, on the job's next attempt", async () => {
    const commit = commitOf("resume");
    const content = randomBytes(3 * 1024 * 1024);
    const half = 1536 * 1024;
    mirror.put(repository, commit, "model.bin", { content, dropAfter: half, delayMs: 1 });
    const job = await finished(await run(commit, [fileOf("model.bin", content)]));
    expect(job.state, JSON.stringify(job.failure)).toBe(JobState.SUCCEEDED);
    expect(job.attempt).toBe(2);
    const ranges = requestsFor(commit).map((r) => r.range);
    expect(ranges[0]).toBeUndefined();
    expect(ranges.at(-1)).toMatch(/^bytes=\d+-$/);
    const resumedFrom = Number(/^bytes=(\d+)-$/.exec(ranges.at(-1)!)![1]);
    expect(resumedFrom).toBeGreaterThan(0);
    expect(resumedFrom).toBeLessThanOrEqual(half);
    expect(job.result!.result.value).toMatchObject({ bytesWritten: BigInt(content.length - resumedFrom) });
    expect(readFileSync(join(root, repository, commit, "model.bin")).equals(content)).toBe(true);
  });
});

describe("the agent's own path rules, whatever the lease says", () => {
  const log = pino({ level: "silent" });
  const attempt = (jobId = "8f8e7c1a-5b1e-4c8e-9f51-0a2d3c4b5e6f"): JobAttempt => ({
    jobId,
    attempt: 1,
    signal: new AbortController().signal,
    progress: async () => ({ cancelRequested: false }),
  });
  const handler = () => artifactAcquireHandler({ sources: [new MirrorSource({ baseUrl: mirror.url })], roots: [root], log });
  const content = Buffer.from("hostile");
  const hostile = async (mutate: (s: ReturnType<typeof spec>) => void) => {
    const s = spec(commitOf("hostile"), [fileOf("ok.bin", content)]);
    mutate(s);
    const before = mirror.requests.length;
    const err = await handler()(create(JobSpecSchema, s), attempt()).then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(mirror.requests.length).toBe(before);
    return err as JobFailureError;
  };
  const value = (s: ReturnType<typeof spec>) => (s.kind as { value: { files: FileInit[]; repository: string; targetRoot: string } }).value;

  it.each([
    ["../../etc/passwd"],
    ["a/../../x"],
    [".git/config"],
    ["~root/x"],
    ["a%2f..%2fb"],
    ["/etc/passwd"],
    ["a//b"],
    ["./a"],
    ["bad\u0001name"],
    ["a\\..\\b"],
  ])("refuses file path %j with PATH_REJECTED", async (path) => {
    const err = await hostile((s) => (value(s).files[0]!.path = path));
    expect(err).toBeInstanceOf(JobFailureError);
    expect(err.code).toBe(JobFailureCode.PATH_REJECTED);
  });

  it("refuses a repository that is a traversal and a target root the agent was not given", async () => {
    for (const repo of ["../escape", "acme/..", "acme/.partial", "a/b/c"]) {
      expect((await hostile((s) => (value(s).repository = repo))).code).toBe(JobFailureCode.PATH_REJECTED);
    }
    expect((await hostile((s) => (value(s).targetRoot = "/tmp"))).code).toBe(JobFailureCode.PATH_REJECTED);
  });

  it("never follows a symlink planted in the target root", async () => {
    const elsewhere = mkdtempSync(join(tmpdir(), "mf-elsewhere-"));
    const commit = commitOf("symlinked");
    mirror.put("evil/model", commit, "ok.bin", { content });
    mkdirSync(join(root, "evil"), { recursive: true });
    symlinkSync(elsewhere, join(root, "evil", "model"));
    const s = spec(commit, [fileOf("ok.bin", content)]);
    value(s).repository = "evil/model";
    const err = (await handler()(create(JobSpecSchema, s), attempt("0b5c1d2e-3f40-4a5b-8c6d-7e8f90a1b2c3")).then(
      () => undefined,
      (e: unknown) => e,
    )) as JobFailureError;
    expect(err.code).toBe(JobFailureCode.PATH_REJECTED);
    expect(readdirSync(elsewhere)).toEqual([]);

    // A symlink where a staged file would go is not written through either.
    const jobId = "1a2b3c4d-5e6f-4a7b-8c9d-0e1f2a3b4c5d";
    const target = join(elsewhere, "victim");
    writeFileSync(target, "untouched");
    mkdirSync(join(root, STAGING_DIR, jobId), { recursive: true });
    symlinkSync(target, join(root, STAGING_DIR, jobId, "ok.bin"));
    const s2 = spec(commitOf("symlinked-file"), [fileOf("ok.bin", content)]);
    mirror.put(repository, commitOf("symlinked-file"), "ok.bin", { content });
    const err2 = (await handler()(create(JobSpecSchema, s2), attempt(jobId)).then(
      () => undefined,
      (e: unknown) => e,
    )) as JobFailureError;
    expect(err2.code).toBe(JobFailureCode.PATH_REJECTED);
    expect(readFileSync(target, "utf8")).toBe("untouched");
    rmSync(elsewhere, { recursive: true, force: true });
    rmSync(join(root, "evil"), { recursive: true, force: true });
    rmSync(join(root, STAGING_DIR, jobId), { recursive: true, force: true });
  });

  it("acquires files spanning several read buffers, through a redirect and from a chunked answer (the node:http path)", async () => {
    const big = randomBytes(3 * 1024 * 1024 + 12345);
    const commit = commitOf("framings");
    mirror.put(repository, commit, "plain.bin", { content: big });
    // A second server: one path redirects to the mirror, the other answers chunked (no Content-Length).
    const other = http.createServer((req, res) => {
      if (req.url!.endsWith("/chunked.bin")) {
        res.writeHead(200);
        for (let at = 0; at < big.length; at += 700_000) res.write(big.subarray(at, at + 700_000));
        res.end();
      } else res.writeHead(302, { location: `${mirror.url}${req.url!.replace("/redirected.bin", "/plain.bin")}` }).end();
    });
    await new Promise<void>((resolve) => other.listen(0, "127.0.0.1", resolve));
    const otherUrl = `http://127.0.0.1:${(other.address() as AddressInfo).port}`;
    try {
      const files = ["plain.bin", "redirected.bin", "chunked.bin"].map((p) => fileOf(p, big));
      const sources = [new MirrorSource({ baseUrl: otherUrl })];
      const s = spec(commit, files.slice(1));
      await artifactAcquireHandler({ sources, roots: [root], log })(
        create(JobSpecSchema, s),
        attempt("5e6f7081-92a3-44b5-86c7-e8f90a1b2c34"),
      );
      await handler()(create(JobSpecSchema, spec(commit, files.slice(0, 1))), attempt("6f708192-a3b4-45c6-97d8-f90a1b2c3d45"));
      for (const f of ["plain.bin", "redirected.bin", "chunked.bin"]) {
        expect(readFileSync(join(root, repository, commit, f)).equals(big)).toBe(true);
      }
    } finally {
      other.close();
    }
  });

  it("downloads through node:http, byte for byte the same, with the mirror fast path off", async () => {
    const content = randomBytes(3 * 1024 * 1024 + 5);
    const commit = commitOf("node-http");
    mirror.put(repository, commit, "plain.bin", { content });
    const read = async (plainHttp: boolean) => {
      const body = await new MirrorSource({ baseUrl: mirror.url, plainHttp }).open({
        repository,
        commit,
        path: "plain.bin",
        offset: 0,
        signal: new AbortController().signal,
      });
      const hash = createHash("sha256");
      for await (const chunk of body.chunks) hash.update(chunk);
      return { sha: hash.digest("hex"), connection: mirror.requests.at(-1)!.connection };
    };
    expect(await read(true)).toEqual({ sha: sha256(content), connection: "close" });
    expect(await read(false)).toEqual({ sha: sha256(content), connection: "keep-alive" });
  });

  it("a slow reader pauses the mirror client and loses no byte when it resumes", async () => {
    const big = randomBytes(9 * 1024 * 1024 + 777);
    const commit = commitOf("slow-reader");
    const flow: MirrorFlow = { stalls: 0, written: false };
    mirror.put(repository, commit, "slow.bin", { content: big, flow });
    const body = await new MirrorSource({ baseUrl: mirror.url }).open({
      repository,
      commit,
      path: "slow.bin",
      offset: 0,
      signal: new AbortController().signal,
    });
    const hash = createHash("sha256");
    let chunks = 0;
    let stalls = 0;
    for await (const chunk of body.chunks) {
      hash.update(chunk);
      // Not reading on until the mirror has had to wait for the client (which stopped reading the
      // socket once its queue was full), or has written everything.
      if (++chunks % 3 === 0) {
        await waitFor(() => flow.written || flow.stalls > stalls, { what: "the mirror held back by the client" });
        stalls = flow.stalls;
      }
    }
    expect(flow.stalls).toBeGreaterThan(0);
    expect(hash.digest("hex")).toBe(sha256(big));
  });

  it("sends the mirror's bearer token from its file, and names NOT_FOUND and SOURCE_UNAVAILABLE apart", async () => {
    const tokenFile = join(root, "..", `mf-token-${process.pid}`);
    writeFileSync(tokenFile, "s3cret-token\n");
    const commit = commitOf("token");
    mirror.put(repository, commit, "ok.bin", { content });
    const withToken = artifactAcquireHandler({ sources: [new MirrorSource({ baseUrl: mirror.url, tokenFile })], roots: [root], log });
    await withToken(create(JobSpecSchema, spec(commit, [fileOf("ok.bin", content)])), attempt("2b3c4d5e-6f70-4182-93a4-b5c6d7e8f901"));
    expect(requestsFor(commit).map((r) => r.authorization)).toEqual(["Bearer s3cret-token"]);
    rmSync(tokenFile);

    const missing = (await handler()(
      create(JobSpecSchema, spec(commitOf("nowhere"), [fileOf("ok.bin", content)])),
      attempt("3c4d5e6f-7081-4293-a4b5-c6d7e8f90a12"),
    ).then(
      () => undefined,
      (e: unknown) => e,
    )) as JobFailureError;
    expect(missing).toMatchObject({ code: JobFailureCode.NOT_FOUND, retryable: false });

    const down = artifactAcquireHandler({ sources: [new MirrorSource({ baseUrl: "http://127.0.0.1:9" })], roots: [root], log });
    const unavailable = (await down(
      create(JobSpecSchema, spec(commitOf("down"), [fileOf("ok.bin", content)])),
      attempt("4d5e6f70-8192-43a4-b5c6-d7e8f90a1b23"),
    ).then(
      () => undefined,
      (e: unknown) => e,
    )) as JobFailureError;
    expect(unavailable).toMatchObject({ code: JobFailureCode.SOURCE_UNAVAILABLE, retryable: true });
  });
});
