// forge artifacts push DIR: a directory's files into the artifact store as one commit. Several
// files travel at once, so a commit of many small files is not one round trip after another;
// each file resumes from whatever the store already holds of it.
import { createHash } from "node:crypto";
import { setMaxListeners } from "node:events";
import { lstat, open, readdir } from "node:fs/promises";
import { join, relative, sep } from "node:path";
import { StoredArtifactFileSchema, type StoredArtifactFile } from "../../gen/proto/modelforge/admin/v1/admin_pb.js";
import { MAX_COMMIT_FILES } from "../../common/artifacts.js";
import { command, requiredOption, UsageError, valueOption, type Context } from "../args.js";
import type { AdminClient } from "../client.js";
import { clean, formatBytes } from "../format.js";
import { printJsonLine } from "../output.js";

/** Bytes per UploadArtifactChunk call: at the server's 1 MiB bound, under every message limit. */
const CHUNK_BYTES = 1024 * 1024;
/**
 * Files pushed at once. Each call of a small file is mostly waiting for the server (its database
 * write, its fsync); this many in flight keep it busy, and bound the chunk buffers held at once.
 */
const PUSH_CONCURRENCY = 16;

interface FoundFile {
  path: string;
  absolute: string;
  size: number;
}

interface LocalFile extends FoundFile {
  sha256: string;
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

async function sha256Of(path: string): Promise<string> {
  const fh = await open(path, "r");
  try {
    const hash = createHash("sha256");
    for await (const chunk of fh.createReadStream({ autoClose: false, highWaterMark: CHUNK_BYTES })) hash.update(chunk as Buffer);
    return hash.digest("hex");
  } finally {
    await fh.close();
  }
}

/** Pushes one file, resuming from whatever the store already holds of it. */
async function pushFile(client: AdminClient, name: CommitName, local: LocalFile, signal: AbortSignal): Promise<Pushed> {
  const base = { ...name, path: local.path, sizeBytes: BigInt(local.size), sha256: local.sha256 };
  let reply = await client.uploadArtifactChunk({ ...base, offset: 0n }, { signal });
  let offset = Number(reply.receivedBytes);
  let sent = 0;
  const fh = await open(local.absolute, "r");
  try {
    const buffer = Buffer.alloc(reply.complete ? 0 : Math.min(CHUNK_BYTES, local.size));
    while (!reply.complete) {
      const { bytesRead } = await fh.read(buffer, 0, Math.min(buffer.length, local.size - offset), offset);
      if (bytesRead === 0) throw new UsageError(`${local.path} changed while it was being pushed`);
      reply = await client.uploadArtifactChunk({ ...base, offset: BigInt(offset), data: buffer.subarray(0, bytesRead) }, { signal });
      offset = Number(reply.receivedBytes);
      sent += bytesRead;
    }
  } finally {
    await fh.close();
  }
  return { local, file: reply.file, sent };
}

/**
 * Hashes and pushes every file, PUSH_CONCURRENCY at once, and hands each outcome to `done` in the
 * files' order. Files with the same content go one after the other (the later then finds it
 * stored), since two uploads of one digest would trip over each other's offsets. The first
 * failure stops the rest and is thrown.
 */
async function pushAll(ctx: Context, name: CommitName, files: FoundFile[], done: (p: Pushed) => void): Promise<void> {
  const client = ctx.client();
  const stop = new AbortController();
  const signal = AbortSignal.any([ctx.signal, stop.signal]);
  // Every call in flight listens on it: more than Node's default of 10 without being a leak.
  setMaxListeners(4 * PUSH_CONCURRENCY, signal);
  const byDigest = new Map<string, Promise<unknown>>();
  const outcomes: (Pushed | undefined)[] = [];
  let reported = 0;
  let next = 0;
  let failure: { error: unknown } | undefined;
  const push = async (f: FoundFile): Promise<Pushed> => {
    const local = { ...f, sha256: await sha256Of(f.absolute) };
    const before = byDigest.get(local.sha256) ?? Promise.resolve();
    const mine = before.then(() => pushFile(client, name, local, signal));
    byDigest.set(local.sha256, mine);
    return mine;
  };
  const worker = async (): Promise<void> => {
    while (failure === undefined && next < files.length) {
      const i = next++;
      try {
        outcomes[i] = await push(files[i]!);
      } catch (error) {
        failure ??= { error };
        stop.abort();
        return;
      }
      for (; outcomes[reported] !== undefined; reported++) done(outcomes[reported]!);
    }
  };
  await Promise.all(Array.from({ length: Math.min(PUSH_CONCURRENCY, files.length) }, worker));
  if (failure !== undefined) throw failure.error;
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
