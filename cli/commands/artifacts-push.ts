// forge artifacts push DIR: a directory's files into the artifact store as one commit. One call
// asks which files the store holds; small files then travel whole, many to a call, several calls
// at once, so a commit of many small files is not round trips one after another; a large file
// streams in chunks, resuming from whatever the store already holds of it.
import { createHash } from "node:crypto";
import { setMaxListeners } from "node:events";
import { lstat, open, readdir, readFile } from "node:fs/promises";
import { join, relative, sep } from "node:path";
import { StoredArtifactFileSchema, type StoredArtifactFile } from "../../gen/proto/modelforge/admin/v1/admin_pb.js";
import { MAX_COMMIT_FILES, MAX_PUT_DATA_BYTES } from "../../common/artifacts.js";
import { mapAtMost } from "../../common/concurrency.js";
import { command, requiredOption, UsageError, valueOption, type Context } from "../args.js";
import type { AdminClient } from "../client.js";
import { clean, formatBytes } from "../format.js";
import { printJsonLine } from "../output.js";
import { groupsOf, planSends } from "./artifacts-push-plan.js";

/** Bytes per UploadArtifactChunk call: at the server's 1 MiB bound, under every message limit. */
const CHUNK_BYTES = 1024 * 1024;
/** Files at most this large are sent whole, many to a call; a larger one would nearly fill a call alone. */
const SMALL_FILE_BYTES = 256 * 1024;
/**
 * Small files per call. A call waits mostly on the server's fsyncs and its transaction; a few
 * calls of this size in flight keep both busy and bound the bytes held at once (each call at most
 * MAX_PUT_DATA_BYTES).
 */
const BATCH_FILES = 100;
const BATCHES_AT_ONCE = 4;
/** Large files streamed at once, each holding one chunk buffer. */
const STREAMS_AT_ONCE = 4;
/** Files hashed at once. */
const HASHES_AT_ONCE = 16;

interface FoundFile {
  path: string;
  absolute: string;
  size: number;
}

interface LocalFile extends FoundFile {
  sha256: string;
  /** Its place among the commit's files, for reporting in order. */
  index: number;
}

interface Missing extends LocalFile {
  /** Bytes of it the store holds from an interrupted push. */
  held: number;
}

interface Pushed {
  local: LocalFile;
  file: StoredArtifactFile | undefined;
  /** Bytes sent; 0 when the store already held the content. */
  sent: number;
}

interface CommitName {
  repository: string;
  commit: string;
}

/** Every regular file under `dir`, by "/"-separated relative path; symlinks are refused, .git skipped. */
async function collectFiles(dir: string): Promise<{ files: FoundFile[]; skipped: string[] }> {
  const root = await lstat(dir).catch(() => undefined);
  if (root === undefined || !root.isDirectory()) throw new UsageError(`${dir} is not a directory`);
  const files: FoundFile[] = [];
  const skipped: string[] = [];
  const walk = async (at: string): Promise<void> => {
    for (const entry of (await readdir(at, { withFileTypes: true })).sort((a, b) => a.name.localeCompare(b.name))) {
      const absolute = join(at, entry.name);
      const path = relative(dir, absolute).split(sep).join("/");
      if (entry.isSymbolicLink()) throw new UsageError(`${path} is a symlink; push real files only`);
      if (entry.isDirectory()) {
        if (entry.name === ".git") skipped.push(path);
        else await walk(absolute);
      } else if (entry.isFile()) {
        files.push({ path, absolute, size: (await lstat(absolute)).size });
      } else skipped.push(path);
    }
  };
  await walk(dir);
  return { files, skipped };
}

async function sha256Of({ absolute: path, size }: FoundFile): Promise<string> {
  // A small file in one read: a stream's setup would cost more than the hashing.
  if (size <= SMALL_FILE_BYTES)
    return createHash("sha256")
      .update(await readFile(path))
      .digest("hex");
  const fh = await open(path, "r");
  try {
    const hash = createHash("sha256");
    for await (const chunk of fh.createReadStream({ autoClose: false, highWaterMark: CHUNK_BYTES })) hash.update(chunk as Buffer);
    return hash.digest("hex");
  } finally {
    await fh.close();
  }
}

/** Streams one file chunk by chunk from `from`, the bytes the store already holds of it. */
async function pushFile(client: AdminClient, name: CommitName, local: Missing, signal: AbortSignal): Promise<Pushed> {
  const base = { ...name, path: local.path, sizeBytes: BigInt(local.size), sha256: local.sha256 };
  let offset = local.held;
  let sent = 0;
  let file: StoredArtifactFile | undefined;
  const fh = await open(local.absolute, "r");
  try {
    const buffer = Buffer.alloc(Math.min(CHUNK_BYTES, local.size));
    for (let complete = false; !complete; ) {
      const { bytesRead } = await fh.read(buffer, 0, Math.min(buffer.length, local.size - offset), offset);
      if (bytesRead === 0) throw new UsageError(`${local.path} changed while it was being pushed`);
      const reply = await client.uploadArtifactChunk({ ...base, offset: BigInt(offset), data: buffer.subarray(0, bytesRead) }, { signal });
      ({ complete, file } = reply);
      offset = Number(reply.receivedBytes);
      sent += bytesRead;
    }
  } finally {
    await fh.close();
  }
  return { local, file, sent };
}

async function readWhole(local: LocalFile): Promise<Buffer> {
  const data = await readFile(local.absolute);
  if (data.length !== local.size) throw new UsageError(`${local.path} changed while it was being pushed`);
  return data;
}

/**
 * One PutArtifactFiles call: the files with their bytes (`withData`), or without to ask which the
 * store holds. Answers each file, in order.
 */
async function putFiles(client: AdminClient, name: CommitName, files: LocalFile[], withData: boolean, signal: AbortSignal) {
  const data = withData ? await Promise.all(files.map(readWhole)) : [];
  const reply = await client.putArtifactFiles(
    { ...name, files: files.map((f, i) => ({ path: f.path, sizeBytes: BigInt(f.size), sha256: f.sha256, data: data[i] })) },
    { signal },
  );
  if (reply.files.length !== files.length) throw new Error(`the store answered ${reply.files.length} of ${files.length} files`);
  return reply.files.map((r, i) => ({ local: files[i]!, file: r.file, complete: r.complete, held: Number(r.receivedBytes) }));
}

/** Hands outcomes, arriving in any order, to `done` in the files' order. */
function inOrder(count: number, done: (p: Pushed) => void): (p: Pushed) => void {
  const outcomes: (Pushed | undefined)[] = new Array(count);
  let next = 0;
  return (p) => {
    outcomes[p.local.index] = p;
    for (; next < count && outcomes[next] !== undefined; next++) done(outcomes[next]!);
  };
}

/**
 * Hashes every file, asks the store which it holds (a whole commit per call), then sends the rest:
 * small files whole, many to a call, BATCHES_AT_ONCE calls in flight; large ones streamed,
 * STREAMS_AT_ONCE at once. Each content travels once: files repeating one are recorded without
 * bytes at the end. Outcomes go to `done` in the files' order; the first failure stops the rest.
 */
async function pushAll(ctx: Context, name: CommitName, files: FoundFile[], done: (p: Pushed) => void): Promise<void> {
  const client = ctx.client();
  const stop = new AbortController();
  const signal = AbortSignal.any([ctx.signal, stop.signal]);
  // Every call in flight listens on it: more than Node's default of 10 without being a leak.
  setMaxListeners(4 * (BATCHES_AT_ONCE + STREAMS_AT_ONCE), signal);
  const report = inOrder(files.length, done);
  const locals = await mapAtMost(files, HASHES_AT_ONCE, async (f, index) => ({ ...f, index, sha256: await sha256Of(f) }));
  const probe = async (group: LocalFile[]): Promise<Missing[]> => {
    const missing: Missing[] = [];
    for (const r of await putFiles(client, name, group, false, signal)) {
      if (r.complete) report({ local: r.local, file: r.file, sent: 0 });
      else missing.push({ ...r.local, held: r.held });
    }
    return missing;
  };
  const plan = planSends((await mapAtMost(groupsOf(locals, MAX_COMMIT_FILES, Infinity), 1, probe)).flat(), SMALL_FILE_BYTES);
  try {
    await Promise.all([
      mapAtMost(groupsOf(plan.small, BATCH_FILES, MAX_PUT_DATA_BYTES), BATCHES_AT_ONCE, async (group) => {
        for (const r of await putFiles(client, name, group, true, signal)) report({ local: r.local, file: r.file, sent: r.local.size });
      }),
      mapAtMost(plan.large, STREAMS_AT_ONCE, async (f) => report(await pushFile(client, name, f, signal))),
    ]);
  } catch (err) {
    stop.abort();
    throw err;
  }
  for (const group of groupsOf(plan.repeats, MAX_COMMIT_FILES, Infinity)) {
    const left = await probe(group);
    if (left.length > 0) throw new Error(`the store did not take ${left[0]!.path} although its content was pushed`);
  }
}

export const pushCommand = command("push DIR", "Push a directory's files into the artifact store as one commit", {
  options: {
    repository: valueOption("ORG/NAME", "repository the files belong to (required)"),
    commit: valueOption("HEX", "the exact 40-hex commit (required)"),
  },
  notes:
    `A commit holds at most ${MAX_COMMIT_FILES} files. Files already stored (same digest) are not sent again; an\n` +
    "interrupted push resumes where it stopped.\n",
  interruptible: true,
  async run(ctx, values, positionals) {
    const name = { repository: requiredOption(values, "repository"), commit: requiredOption(values, "commit") };
    const dir = positionals[0]!;
    const { files, skipped } = await collectFiles(dir);
    if (files.length === 0) throw new UsageError(`${dir} holds no files`);
    if (files.length > MAX_COMMIT_FILES) {
      throw new UsageError(`${dir} holds ${files.length} files; a commit holds at most ${MAX_COMMIT_FILES}`);
    }
    for (const path of skipped) ctx.err(`skipped ${clean(path)} (${path.endsWith(".git") ? "git metadata" : "not a regular file"})\n`);
    let total = 0;
    await pushAll(ctx, name, files, ({ local, file, sent }) => {
      total += sent;
      if (ctx.json) {
        if (file !== undefined) printJsonLine(ctx, StoredArtifactFileSchema, file);
      } else ctx.out(`${sent > 0 ? "pushed " : "present"} ${clean(local.path)}  ${formatBytes(local.size)}  sha256:${local.sha256}\n`);
    });
    if (!ctx.json) ctx.out(`${files.length} files stored for ${name.repository}@${name.commit} (${formatBytes(total)} sent).\n`);
    return 0;
  },
});
