// The agent's artifact roots exist before it takes any job: each configured root that is missing
// is created at start (with its parents), readable by the agent's group and nobody else, and a
// root the agent cannot create, or one that is not a real directory, stops it there, named.
// Otherwise the first acquisition would fail on the node with NOT_FOUND, long after the mistake.
import { chmod, lstat, mkdir } from "node:fs/promises";
import { SourceConfigError } from "./artifact-sources.js";

/** The mode of a root the agent creates: artifacts are for the agent and its runtimes' group. */
export const ARTIFACT_ROOT_MODE = 0o750;

/** Creates the roots that are missing; resolves with those it created. */
export async function prepareArtifactRoots(roots: readonly string[]): Promise<string[]> {
  const created: string[] = [];
  for (const root of roots) {
    let made: string | undefined;
    try {
      made = await mkdir(root, { recursive: true, mode: ARTIFACT_ROOT_MODE });
      // The process's umask may have taken bits off; the root itself gets exactly its mode.
      if (made !== undefined) await chmod(root, ARTIFACT_ROOT_MODE);
    } catch (err) {
      throw new SourceConfigError(`MODELFORGE_AGENT_ARTIFACT_ROOTS: cannot create the artifact root ${root}: ${reason(err)}`);
    }
    const st = await lstat(root);
    if (!st.isDirectory()) {
      throw new SourceConfigError(
        `MODELFORGE_AGENT_ARTIFACT_ROOTS: the artifact root ${root} is not a real directory (a symlink or a file)`,
      );
    }
    if (made !== undefined) created.push(root);
  }
  return created;
}

function reason(err: unknown): string {
  const e = err as NodeJS.ErrnoException;
  switch (e.code) {
    case "ENOTDIR":
      return "a file is in the way";
    case "EEXIST":
      return "a file of that name exists";
    case "EACCES":
    case "EPERM":
      return "permission denied";
    case "EROFS":
      return "the file system is read-only";
    default:
      return e.code ?? e.message;
  }
}
