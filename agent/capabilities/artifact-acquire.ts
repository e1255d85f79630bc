// artifact.acquire.v1: fetch an exact commit's files from the agent's configured sources into
// `<target root>/<repository>/<commit>/`, verified.
//
// Files are written into a staging directory inside the target root (`.partial/<job id>`), each
// hashed while it streams in and checked against the lease's size and SHA-256; the staging
// directory is then renamed into place in one step (or, when the commit's directory already holds
// some files, each verified file is renamed in). No symlink is ever followed or created: every
// directory on the way is checked with lstat and files are opened with O_NOFOLLOW. A retry of the
// same job resumes the files it finds in its staging directory (HTTP Range, or the control
// plane's offset); a cancel removes them. A file already in the commit's directory with the right
// digest is not fetched again. The disk reserve is checked before starting and while writing.
import { createHash, type Hash } from "node:crypto";
import { constants, createReadStream } from "node:fs";
import { lstat, mkdir, open, rename, rm, statfs, type FileHandle } from "node:fs/promises";
import { join } from "node:path";
import type { Logger } from "pino";
import { JobFailureCode, type ArtifactAcquire, type ArtifactFile, type JobSpec } from "../../gen/proto/modelforge/jobs/v1/jobs_pb.js";
import { JobFailureError, type JobAttempt, type JobHandler, type JobHandlerResult } from "../jobs/registry.js";
import { JobCancelled } from "../jobs/runner.js";
import { checkCommit, checkDistinctPaths, checkRelativePath, checkRepository, checkTargetRoot, PathRejected } from "./artifact-paths.js";
import { SourceError, type ArtifactSource, type SourceBody } from "./artifact-sources.js";
import { ArtifactWriteError, HashWriter } from "./hash-writer.js";

/** The staging area's name inside a target root; repository owners cannot start with ".". */
export const STAGING_DIR = ".partial";

export interface ArtifactAcquireOptions {
  /** Tried in order for every file. */
  sources: ArtifactSource[];
  /** Target roots this agent accepts, whatever the server approved. */
  roots: string[];
  log: Logger;
  /** Least time between progress reports (default 1 s). */
  progressIntervalMs?: number;
  /** Bytes written between two checks of the disk reserve (default 64 MiB). */
  reserveCheckBytes?: number;
  /** Job ids acquiring now, kept up to date here, so the staging sweeper leaves their staging alone. */
  active?: Set<string>;
}

interface Plan {
  spec: ArtifactAcquire;
  root: string;
  finalDir: string;
  stagingDir: string;
  /** Each file with its checked path segments. */
  files: { file: ArtifactFile; segments: string[]; size: number }[];
}

const SHA256 = /^[0-9a-f]{64}$/;
const O_WRITE = constants.O_RDWR | constants.O_CREAT | constants.O_NOFOLLOW;
const O_READ = constants.O_RDONLY | constants.O_NOFOLLOW;

function failure(code: JobFailureCode, message: string, retryable = false): JobFailureError {
  return new JobFailureError(code, message, retryable);
}

/** Checks the lease against the agent's own rules; nothing touches the disk before this passes. */
export function planAcquisition(spec: JobSpec, jobId: string, roots: readonly string[]): Plan {
  if (spec.kind.case !== "artifactAcquire") throw failure(JobFailureCode.INVALID_SPEC, "not an artifact.acquire.v1 job");
  const a = spec.kind.value;
  try {
    checkTargetRoot(a.targetRoot, roots);
    const repo = checkRepository(a.repository);
    checkCommit(a.commit);
    if (a.files.length === 0) throw failure(JobFailureCode.INVALID_SPEC, "the job names no files");
    const files = a.files.map((file, i) => {
      const segments = checkRelativePath(file.path, `files[${i}].path`);
      if (!SHA256.test(file.sha256)) throw failure(JobFailureCode.INVALID_SPEC, `files[${i}].sha256 is not a SHA-256 digest`);
      const size = Number(file.sizeBytes);
      if (!(size > 0) || !Number.isSafeInteger(size)) throw failure(JobFailureCode.INVALID_SPEC, `files[${i}].size_bytes is out of range`);
      return { file, segments, size };
    });
    checkDistinctPaths(a.files.map((f) => f.path));
    return {
      spec: a,
      root: a.targetRoot,
      finalDir: join(a.targetRoot, ...repo, a.commit),
      stagingDir: join(a.targetRoot, STAGING_DIR, checkRelativePath(jobId, "job id")[0]!),
      files,
    };
  } catch (err) {
    if (err instanceof PathRejected) throw failure(JobFailureCode.PATH_REJECTED, err.message);
    throw err;
  }
}

/** The lstat of `base/segments...` when every directory on the way is a real one; undefined if absent. */
async function lstatInside(base: string, segments: readonly string[]) {
  let p = base;
  for (let i = 0; i < segments.length; i++) {
    p = join(p, segments[i]!);
    const st = await lstat(p).catch((err: NodeJS.ErrnoException) => {
      if (err.code === "ENOENT" || err.code === "ENOTDIR") return undefined;
      throw err;
    });
    if (st === undefined) return undefined;
    if (st.isSymbolicLink()) throw failure(JobFailureCode.PATH_REJECTED, "a symlink is in the way of an artifact path");
    if (i < segments.length - 1 && !st.isDirectory())
      throw failure(JobFailureCode.PATH_REJECTED, "a file is in the way of an artifact directory");
    if (i === segments.length - 1) return st;
  }
  return undefined;
}

/** Creates `base/segments...` one real directory at a time, refusing symlinks on the way. */
async function mkdirInside(base: string, segments: readonly string[]): Promise<string> {
  let p = base;
  for (const segment of segments) {
    p = join(p, segment);
    await mkdir(p, { mode: 0o755 }).catch((err: NodeJS.ErrnoException) => {
      if (err.code !== "EEXIST") throw err;
    });
    const st = await lstat(p);
    if (!st.isDirectory() || st.isSymbolicLink())
      throw failure(JobFailureCode.PATH_REJECTED, "a symlink or file is in the way of an artifact directory");
  }
  return p;
}

async function checkRoot(root: string): Promise<void> {
  const st = await lstat(root).catch(() => undefined);
  if (st === undefined) throw failure(JobFailureCode.NOT_FOUND, "the target root does not exist on this node");
  if (!st.isDirectory() || st.isSymbolicLink()) throw failure(JobFailureCode.PATH_REJECTED, "the target root is not a real directory");
}

/** Hashes `length` bytes of an open file from its start. */
async function hashPrefix(fh: FileHandle, length: number, hash: Hash): Promise<void> {
  if (length === 0) return;
  const stream = createReadStream("", { fd: fh, start: 0, end: length - 1, autoClose: false, highWaterMark: 1 << 20 });
  for await (const chunk of stream) hash.update(chunk as Buffer);
}

/** Whether a regular file at `dir/segments` has exactly this size and digest. */
async function hasVerifiedCopy(dir: string, segments: string[], file: ArtifactFile, size: number): Promise<boolean> {
  const st = await lstatInside(dir, segments);
  if (st === undefined || !st.isFile() || st.size !== size) return false;
  const fh = await open(join(dir, ...segments), O_READ);
  try {
    const hash = createHash("sha256");
    await hashPrefix(fh, size, hash);
    return hash.digest("hex") === file.sha256;
  } finally {
    await fh.close();
  }
}

export interface Reserve {
  minFreeBytes: bigint;
  minFreePercent: number;
}

/** Bytes that must stay free on a file system of `total` bytes: the larger of the two rules. */
export function reserveFloor(reserve: Reserve | undefined, total: number): number {
  if (reserve === undefined) return 0;
  return Math.max(Number(reserve.minFreeBytes), Math.ceil((total * reserve.minFreePercent) / 100));
}

async function checkReserve(root: string, stillToWrite: number, reserve: Reserve | undefined): Promise<void> {
  const fs = await statfs(root);
  const free = fs.bavail * fs.bsize;
  const floor = reserveFloor(reserve, fs.blocks * fs.bsize);
  if (free - stillToWrite < floor) {
    throw failure(
      JobFailureCode.INSUFFICIENT_DISK,
      `the files need ${stillToWrite} more bytes and ${floor} bytes must stay free, but only ${free} bytes are free`,
    );
  }
}

/** Progress in bytes, sent at most every `intervalMs`; sending never holds up the download. */
class ProgressMeter {
  done = 0;
  private lastSent = 0;
  constructor(
    private readonly ctx: JobAttempt,
    readonly total: number,
    private readonly intervalMs: number,
  ) {}
  add(bytes: number, message: string): void {
    this.done += bytes;
    const now = Date.now();
    if (now - this.lastSent < this.intervalMs) return;
    this.lastSent = now;
    const percent = this.total === 0 ? 100 : Math.min(100, (this.done / this.total) * 100);
    this.ctx.progress({ percent, bytesDone: BigInt(this.done), bytesTotal: BigInt(this.total), message }).catch(() => undefined);
  }
}

export function artifactAcquireHandler(opts: ArtifactAcquireOptions): JobHandler {
  const settings: Settings = {
    sources: opts.sources,
    roots: opts.roots,
    log: opts.log,
    progressIntervalMs: opts.progressIntervalMs ?? 1_000,
    reserveCheckBytes: opts.reserveCheckBytes ?? 64 * 1024 * 1024,
  };
  const active = opts.active ?? new Set<string>();
  return async (spec, ctx): Promise<JobHandlerResult> => {
    active.add(ctx.jobId);
    try {
      return await acquire(settings, spec, ctx);
    } finally {
      active.delete(ctx.jobId);
    }
  };
}

type Settings = Required<Omit<ArtifactAcquireOptions, "active">>;

async function acquire(settings: Settings, spec: JobSpec, ctx: JobAttempt): Promise<JobHandlerResult> {
  const plan = planAcquisition(spec, ctx.jobId, settings.roots);
  const log = settings.log.child({ jobId: ctx.jobId, attempt: ctx.attempt, repository: plan.spec.repository, commit: plan.spec.commit });
  await checkRoot(plan.root);
  const meter = new ProgressMeter(
    ctx,
    plan.files.reduce((n, f) => n + f.size, 0),
    settings.progressIntervalMs,
  );
  // What the commit's directory already holds, verified, is kept; the rest is fetched.
  const missing: Plan["files"] = [];
  let bytesReused = 0;
  for (const f of plan.files) {
    if (await hasVerifiedCopy(plan.finalDir, f.segments, f.file, f.size)) {
      bytesReused += f.size;
      meter.add(f.size, `present: ${f.file.path}`);
    } else missing.push(f);
  }
  let staged = 0;
  for (const f of missing) {
    const st = await lstatInside(plan.stagingDir, f.segments);
    if (st?.isFile()) staged += Math.min(st.size, f.size);
  }
  await checkReserve(plan.root, missing.reduce((n, f) => n + f.size, 0) - staged, plan.spec.reserve);
  const { bytesWritten, sourcesUsed } = await download(settings, plan, missing, staged, { ctx, meter, log });
  log.info({ bytesWritten, bytesReused, files: plan.files.length }, "artifact acquired");
  return {
    result: {
      case: "artifactAcquire",
      value: {
        path: plan.finalDir,
        bytesWritten: BigInt(bytesWritten),
        bytesReused: BigInt(bytesReused),
        source: [...sourcesUsed].join(","),
        files: plan.files.map((f) => ({ path: f.file.path, sizeBytes: BigInt(f.size), sha256: f.file.sha256 })),
      },
    },
  };
}

/**
 * Fetches the missing files into the job's staging directory, checking the disk reserve as bytes
 * arrive, then promotes them into the commit's directory. On failure the staging is kept for a
 * resume, unless the job was cancelled or the disk is full.
 */
async function download(
  settings: Settings,
  plan: Plan,
  missing: Plan["files"],
  staged: number,
  { ctx, meter, log }: { ctx: JobAttempt; meter: ProgressMeter; log: Logger },
): Promise<{ bytesWritten: number; sourcesUsed: Set<string> }> {
  let bytesWritten = 0;
  const sourcesUsed = new Set<string>();
  /** Each verified file's flush to disk, running while the next file downloads. */
  const durable: Promise<void>[] = [];
  const writer = new HashWriter();
  try {
    await mkdirInside(plan.root, [STAGING_DIR, ...checkRelativePath(ctx.jobId, "job id")]);
    let sinceReserveCheck = 0;
    const onBytes = async (n: number, path: string) => {
      bytesWritten += n;
      meter.add(n, `fetching ${path}`);
      sinceReserveCheck += n;
      if (sinceReserveCheck >= settings.reserveCheckBytes) {
        sinceReserveCheck = 0;
        const left = missing.reduce((sum, f) => sum + f.size, 0) - staged - bytesWritten;
        await checkReserve(plan.root, Math.max(0, left), plan.spec.reserve);
      }
    };
    for (const f of missing) {
      const dir = await mkdirInside(plan.stagingDir, f.segments.slice(0, -1));
      const deps = { sources: settings.sources, writer, ctx, meter, onBytes, log };
      const fetched = await fetchFile(join(dir, f.segments.at(-1)!), plan, f, deps);
      durable.push(fetched.durable);
      if (fetched.used !== undefined) sourcesUsed.add(fetched.used);
    }
    // Every file on disk for good before any is promoted.
    await Promise.all(durable);
    await promote(plan, missing);
  } catch (err) {
    // No flush may still hold a file open when its staging is removed.
    await Promise.allSettled(durable);
    const reason: unknown = ctx.signal.reason;
    const cancelled = ctx.signal.aborted && reason instanceof JobCancelled;
    const full = err instanceof JobFailureError && err.code === JobFailureCode.INSUFFICIENT_DISK;
    // Keep staged bytes for a resume unless the job is over or they are what fills the disk.
    if (cancelled || full) await rm(plan.stagingDir, { recursive: true, force: true });
    if (ctx.signal.aborted) throw reason;
    throw err;
  } finally {
    await writer.close();
  }
  return { bytesWritten, sourcesUsed };
}

/** What fetching a file works with, the same for every file of one job. */
interface FetchDeps {
  sources: ArtifactSource[];
  writer: HashWriter;
  ctx: JobAttempt;
  meter: ProgressMeter;
  onBytes: (n: number, path: string) => Promise<void>;
  log: Logger;
}

/**
 * Fetches one file into `target` (resuming what is there), trying the sources in order, and
 * verifies it. Returns the label of the source that delivered bytes (if any had to) and the
 * file's flush to disk: an fsync waits for the disk, so it runs while the next file downloads.
 */
async function fetchFile(
  target: string,
  plan: Plan,
  f: Plan["files"][number],
  deps: FetchDeps,
): Promise<{ used: string | undefined; durable: Promise<void> }> {
  const fh = await open(target, O_WRITE, 0o644).catch((err: NodeJS.ErrnoException) => {
    if (err.code === "ELOOP") throw failure(JobFailureCode.PATH_REJECTED, "a symlink is in the way of an artifact file");
    throw err;
  });
  let keep = true;
  let handedOver = false;
  try {
    const fetch = new FileFetch(fh, plan, f, deps);
    await fetch.resume();
    for (const source of deps.sources) {
      if (fetch.complete) break;
      deps.ctx.signal.throwIfAborted();
      await fetch.from(source);
    }
    fetch.checkComplete();
    if ((await fetch.digest()) !== f.file.sha256) {
      keep = false;
      throw failure(
        JobFailureCode.CHECKSUM_MISMATCH,
        `${f.file.path}: SHA-256 of the ${f.size} bytes received does not match the job's digest`,
      );
    }
    handedOver = true;
    const durable = fh.sync().finally(() => fh.close());
    // Awaited by the caller; marked handled here so a failure waiting its turn is not "unhandled".
    durable.catch(() => undefined);
    return { used: fetch.used, durable };
  } finally {
    if (!handedOver) await fh.close();
    // Corrupt bytes must not be resumed from.
    if (!keep) await rm(target, { force: true });
  }
}

/** One file's bytes on their way in: how many are on disk, from which source, and their digest. */
class FileFetch {
  /** Bytes on disk, verified or not. */
  private have = 0;
  /** The digest of the whole file, once a source delivered all of it. */
  private received: string | undefined;
  /** Why the last source that failed could not deliver, when a later attempt may do better. */
  private unavailable: string | undefined;
  used: string | undefined;

  constructor(
    private readonly fh: FileHandle,
    private readonly plan: Plan,
    private readonly f: Plan["files"][number],
    private readonly deps: FetchDeps,
  ) {}

  get complete(): boolean {
    return this.have === this.f.size;
  }

  /** Takes over what an earlier attempt staged; more than the file can hold is started over. */
  async resume(): Promise<void> {
    const st = await this.fh.stat();
    if (!st.isFile()) throw failure(JobFailureCode.PATH_REJECTED, "an artifact path is not a regular file");
    this.have = st.size;
    if (this.have > this.f.size) {
      await this.fh.truncate(0);
      this.have = 0;
    }
    this.deps.meter.add(this.have, `resuming ${this.f.file.path}`);
  }

  /** Fetches the rest from one source; a source that cannot serve it leaves it to the next. */
  async from(source: ArtifactSource): Promise<void> {
    const { ctx, log } = this.deps;
    const path = this.f.file.path;
    let body: SourceBody;
    try {
      body = await source.open({
        repository: this.plan.spec.repository,
        commit: this.plan.spec.commit,
        path,
        offset: this.have,
        signal: ctx.signal,
      });
    } catch (err) {
      if (ctx.signal.aborted) throw ctx.signal.reason;
      if (!(err instanceof SourceError)) throw err;
      if (err.kind === "unavailable") this.unavailable = err.message;
      log.warn({ source: source.label, path, reason: err.message }, "artifact source could not serve the file; trying the next");
      return;
    }
    try {
      await this.receive(source, body);
    } catch (err) {
      body.close();
      if (ctx.signal.aborted) throw ctx.signal.reason;
      if (err instanceof JobFailureError || err instanceof ArtifactWriteError) throw err;
      // A dropped connection: keep what arrived; the next source (or attempt) resumes from here.
      this.unavailable =
        err instanceof SourceError ? err.message : `${source.label}: ${(err as NodeJS.ErrnoException).code ?? (err as Error).message}`;
      log.warn({ source: source.label, path, reason: this.unavailable, bytes: this.have }, "artifact download interrupted");
    }
  }

  /** Writes a source's answer from where the file stands (or from its start, when the source insists). */
  private async receive(source: ArtifactSource, body: SourceBody): Promise<void> {
    const { f } = this;
    const { writer, meter, log } = this.deps;
    if (body.totalSize !== undefined && body.totalSize !== f.size) {
      throw failure(JobFailureCode.SIZE_MISMATCH, `${f.file.path}: ${source.label} has ${body.totalSize} bytes, the job expects ${f.size}`);
    }
    if (body.start !== this.have) {
      if (body.start !== 0) throw new SourceError("unavailable", `${source.label}: answered from byte ${body.start}, not ${this.have}`);
      await this.fh.truncate(0);
      meter.add(-this.have, `restarting ${f.file.path}`);
      this.have = 0;
    }
    if (this.have > 0) log.info({ source: source.label, path: f.file.path, offset: this.have }, "resuming a partial file");
    this.used = source.label;
    await writer.open(this.fh.fd, this.have);
    let whole = false;
    try {
      for await (const chunk of body.chunks) {
        if (this.have + chunk.byteLength > f.size) {
          throw failure(JobFailureCode.SIZE_MISMATCH, `${f.file.path}: ${source.label} sent more than the ${f.size} bytes the job expects`);
        }
        const n = chunk.byteLength;
        // The writer takes the chunk over (its memory may move to the worker): not used after.
        await writer.push(chunk);
        this.have += n;
        await this.deps.onBytes(n, f.file.path);
      }
      whole = true;
    } finally {
      // Everything counted in `have` is on disk before anyone resumes from it.
      const written = await writer.finish().catch(diskFailure);
      if (whole) this.received = written;
    }
    if (this.have < f.size) throw new SourceError("unavailable", `${source.label}: the connection ended at byte ${this.have} of ${f.size}`);
  }

  /** Fails the file when no source could complete it: retryable if one was only unavailable. */
  checkComplete(): void {
    if (this.complete) return;
    const { f, plan } = this;
    if (this.unavailable !== undefined) throw failure(JobFailureCode.SOURCE_UNAVAILABLE, `${f.file.path}: ${this.unavailable}`, true);
    throw failure(JobFailureCode.NOT_FOUND, `${f.file.path}: no configured source has ${plan.spec.repository}@${plan.spec.commit}`);
  }

  /** The digest of the complete file: as it streamed in, or (staged by an earlier attempt) read back. */
  async digest(): Promise<string> {
    if (this.received !== undefined) return this.received;
    await this.deps.writer.open(this.fh.fd, this.have);
    return this.deps.writer.finish().catch(diskFailure);
  }
}

/** A failed write: a full disk is INSUFFICIENT_DISK, anything else stays an unexpected error. */
function diskFailure(err: Error): never {
  if (/ENOSPC|EDQUOT/.test(err.message)) throw failure(JobFailureCode.INSUFFICIENT_DISK, "the file system filled up while writing");
  throw err;
}

/** Moves the verified files into the commit's directory: the whole staging directory when it can. */
async function promote(plan: Plan, fetched: Plan["files"]): Promise<void> {
  const [owner, name] = plan.spec.repository.split("/") as [string, string];
  const repoDir = await mkdirInside(plan.root, [owner, name]);
  const existing = await lstatInside(repoDir, [plan.spec.commit]);
  if (existing === undefined) {
    try {
      await rename(plan.stagingDir, plan.finalDir);
      await syncDir(repoDir);
      return;
    } catch (err) {
      // Another job created the directory meanwhile: fall through to file by file.
      if ((err as NodeJS.ErrnoException).code !== "ENOTEMPTY" && (err as NodeJS.ErrnoException).code !== "EEXIST") throw err;
    }
  } else if (!existing.isDirectory()) throw failure(JobFailureCode.PATH_REJECTED, "the commit's directory is not a real directory");
  for (const f of fetched) {
    const dir = await mkdirInside(plan.finalDir, f.segments.slice(0, -1));
    const st = await lstatInside(plan.finalDir, f.segments);
    if (st !== undefined && !st.isFile())
      throw failure(JobFailureCode.PATH_REJECTED, "an artifact path in the commit's directory is not a regular file");
    await rename(join(plan.stagingDir, ...f.segments), join(dir, f.segments.at(-1)!));
  }
  await rm(plan.stagingDir, { recursive: true, force: true });
  await syncDir(plan.finalDir);
}

async function syncDir(dir: string): Promise<void> {
  const fh = await open(dir, constants.O_RDONLY | constants.O_DIRECTORY).catch(() => undefined);
  if (fh === undefined) return;
  await fh.sync().catch(() => undefined);
  await fh.close();
}
