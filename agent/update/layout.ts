// Where self-update keeps its files, beside the state file (the state directory is the one place
// the service may write): downloads, the releases swapped in, the `current` link the service
// starts, the pending update the next start checks, and the report the next Hello carries.
import { readFile, rename, rm, symlink, writeFile } from "node:fs/promises";
import { dirname, join } from "node:path";

export interface UpdateLayout {
  dir: string;
  downloads: string;
  releases: string;
  /** A symlink to the directory whose modelforge-agent.mjs the service runs. */
  current: string;
  pending: string;
  report: string;
}

export function updateLayout(statePath: string): UpdateLayout {
  const dir = join(dirname(statePath), "update");
  return {
    dir,
    downloads: join(dir, "downloads"),
    releases: join(dir, "releases"),
    current: join(dir, "current"),
    pending: join(dir, "pending.json"),
    report: join(dir, "report.json"),
  };
}

/** An update swapped in and not yet proven by a healthy session. */
export interface PendingUpdate {
  rolloutId: string;
  version: string;
  /** The directory `current` pointed at before: what a rollback restores. */
  previous: string;
  /** Starts of the new agent so far. */
  attempts: number;
  /** Epoch ms by which it must reach a healthy session. */
  deadlineAt: number;
}

/** The outcome the next Hello reports (AgentUpdateReport). */
export interface UpdateReport {
  rolloutId: string;
  version: string;
  succeeded: boolean;
  reason: string;
}

export async function readJson<T>(path: string): Promise<T | undefined> {
  const text = await readFile(path, "utf8").catch((err: NodeJS.ErrnoException) => {
    if (err.code === "ENOENT") return undefined;
    throw err;
  });
  if (text === undefined) return undefined;
  try {
    return JSON.parse(text) as T;
  } catch {
    // A torn write is treated as absent: the file is only ever replaced by rename.
    return undefined;
  }
}

/** Replaces `path` with `value` in one rename, so a reader sees the old file or the new, never half. */
export async function writeJson(path: string, value: unknown): Promise<void> {
  const tmp = `${path}.${process.pid}.tmp`;
  await writeFile(tmp, `${JSON.stringify(value)}\n`, { mode: 0o600 });
  await rename(tmp, path);
}

/** Points the `current` link at `target` in one rename (a link is never missing in between). */
export async function pointCurrent(layout: UpdateLayout, target: string): Promise<void> {
  const tmp = `${layout.current}.${process.pid}.tmp`;
  await rm(tmp, { force: true });
  await symlink(target, tmp);
  await rename(tmp, layout.current);
}
