// Staging left by acquisitions that will never resume (the agent crashed, or the job expired or
// was cancelled while the agent was away) is removed: at start and periodically, every staging
// directory under a target root's `.partial/` that has not changed for longer than the configured
// age, and that no running job owns. Only real directories named like a job id are touched, and
// nothing is followed: the root and `.partial` must be real directories (lstat), and the removal
// unlinks symlinks inside rather than following them.
import { lstat, readdir, rm } from "node:fs/promises";
import { join } from "node:path";
import type { Logger } from "pino";
import type { Clock } from "../../common/clock.js";
import { checkRelativePath, PathRejected } from "./artifact-paths.js";
import { STAGING_DIR } from "./artifact-acquire.js";

export interface SweepOptions {
  roots: readonly string[];
  /** Staging unchanged for longer than this is abandoned. */
  maxAgeMs: number;
  now: number;
  /** Job ids whose acquisition is running on this agent now: never removed. */
  active: ReadonlySet<string>;
}

export interface SweptDir {
  root: string;
  jobId: string;
  /** Milliseconds since anything in it last changed. */
  idleMs: number;
}

/** Whether a staging directory is abandoned: pure, so the rule has table tests. */
export function isAbandoned(newestChangeMs: number, now: number, maxAgeMs: number): boolean {
  return now - newestChangeMs > maxAgeMs;
}

/** The latest mtime of a directory and everything under it, never following a link. */
async function newestChange(dir: string): Promise<number> {
  let newest = (await lstat(dir)).mtimeMs;
  for (const entry of await readdir(dir, { withFileTypes: true })) {
    const p = join(dir, entry.name);
    if (entry.isDirectory()) newest = Math.max(newest, await newestChange(p));
    else newest = Math.max(newest, (await lstat(p)).mtimeMs);
  }
  return newest;
}

async function isRealDir(path: string): Promise<boolean> {
  const st = await lstat(path).catch(() => undefined);
  // lstat: a link to a directory is not a directory here.
  return st?.isDirectory() === true;
}

function isJobId(name: string): boolean {
  try {
    return checkRelativePath(name, "job id").length === 1;
  } catch (err) {
    if (err instanceof PathRejected) return false;
    throw err;
  }
}

/** Removes abandoned staging directories; returns what it removed. */
export async function sweepStaging(opts: SweepOptions): Promise<SweptDir[]> {
  const swept: SweptDir[] = [];
  for (const root of opts.roots) {
    const staging = join(root, STAGING_DIR);
    if (!(await isRealDir(root)) || !(await isRealDir(staging))) continue;
    for (const entry of await readdir(staging, { withFileTypes: true })) {
      // Only directories the acquisition itself creates: a job id, a real directory.
      if (!entry.isDirectory() || !isJobId(entry.name) || opts.active.has(entry.name)) continue;
      const dir = join(staging, entry.name);
      const newest = await newestChange(dir).catch(() => undefined);
      if (newest === undefined || !isAbandoned(newest, opts.now, opts.maxAgeMs)) continue;
      // The job may have started again between the check and here: look once more.
      if (opts.active.has(entry.name)) continue;
      await rm(dir, { recursive: true, force: true });
      swept.push({ root, jobId: entry.name, idleMs: opts.now - newest });
    }
  }
  return swept;
}

export interface SweeperOptions extends Omit<SweepOptions, "now"> {
  clock: Clock;
  /** Time between sweeps after the first one, at start. */
  intervalMs: number;
  log: Logger;
  signal: AbortSignal;
}

/** Sweeps at once, then every interval until the signal aborts. Never rejects. */
export async function runStagingSweeper(opts: SweeperOptions): Promise<void> {
  while (!opts.signal.aborted) {
    try {
      for (const s of await sweepStaging({ ...opts, now: opts.clock.now() })) {
        opts.log.info({ root: s.root, jobId: s.jobId, idleMs: Math.round(s.idleMs) }, "removed abandoned artifact staging");
      }
    } catch (err) {
      opts.log.warn({ err: (err as Error).message }, "sweeping abandoned artifact staging failed");
    }
    await opts.clock.sleep(opts.intervalMs, opts.signal);
  }
}
