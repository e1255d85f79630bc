// The agent's own path rules for artifact.acquire.v1. The server validated the lease already; the
// agent checks again before touching the disk, because a lease is data from the network and a
// compromised or buggy control plane must not be able to write outside the target root.
//
// Every relative path the handler uses goes through `checkRelativePath`, which applies the
// contract's shared path grammar.
import { relativeArtifactPathProblem } from "../../common/paths.js";

/** A path, repository or root refused by the node's own rules (JOB_FAILURE_CODE_PATH_REJECTED). */
export class PathRejected extends Error {
  override readonly name = "PathRejected";
}

/**
 * Checks a "/"-separated path relative to a directory the agent owns against the contract's
 * artifact path grammar (common/paths.ts, the same function the server validates leases with),
 * and returns its segments.
 * @throws PathRejected naming the broken rule, never echoing more than the rule.
 */
export function checkRelativePath(value: string, what = "path"): string[] {
  const problem = relativeArtifactPathProblem(value);
  if (problem !== undefined) throw new PathRejected(`${what} ${problem}`);
  return value.split("/");
}

/** A repository is "owner/name": exactly two segments of the same grammar. */
export function checkRepository(value: string): string[] {
  const segments = checkRelativePath(value, "repository");
  if (segments.length !== 2) throw new PathRejected("repository must be owner/name");
  // Leading dots are not repository names, and keep the agent's own ".partial" area apart.
  if (segments.some((s) => s.startsWith("."))) throw new PathRejected('repository owner and name must not start with "."');
  return segments;
}

const COMMIT = /^[0-9a-f]{40}$/;

/** An exact commit, which also becomes a directory name. */
export function checkCommit(value: string): void {
  if (!COMMIT.test(value)) throw new PathRejected("commit must be 40 lowercase hex digits");
}

/**
 * The target root must be one of the roots this agent was configured with, spelled exactly so:
 * the server's list of approved roots is not the agent's to trust.
 */
export function checkTargetRoot(value: string, agentRoots: readonly string[]): void {
  if (!agentRoots.includes(value)) throw new PathRejected("target_root is not one of this agent's artifact roots");
}

/**
 * No two files may share a path (compared without case, for case-folding file systems), and no
 * file may sit where another file needs a directory ("a" and "a/b").
 */
export function checkDistinctPaths(paths: readonly string[]): void {
  const files = new Set(paths.map((p) => p.toLowerCase()));
  if (files.size !== paths.length) throw new PathRejected("two files share a path (compared without case)");
  for (const p of files) {
    const segments = p.split("/");
    for (let i = 1; i < segments.length; i++) {
      if (files.has(segments.slice(0, i).join("/"))) throw new PathRejected("a file path is also used as a directory of another file");
    }
  }
}
