// The agent's own path rules for artifact.acquire.v1. The server validated the lease already; the
// agent checks again before touching the disk, because a lease is data from the network and a
// compromised or buggy control plane must not be able to write outside the target root.
//
// Every relative path the handler uses goes through `checkRelativePath`, so the contract's shared
// path grammar can replace this strict implementation in one place.

/** Longest relative path accepted, in bytes of UTF-8. */
export const MAX_RELATIVE_PATH_BYTES = 1024;
/** Deepest relative path accepted, in segments. */
export const MAX_RELATIVE_PATH_DEPTH = 16;
/** Longest single segment, in bytes (the usual NAME_MAX). */
export const MAX_SEGMENT_BYTES = 255;

/** A path, repository or root refused by the node's own rules (JOB_FAILURE_CODE_PATH_REJECTED). */
export class PathRejected extends Error {
  override readonly name = "PathRejected";
}

// A portable set: letters, digits, ".", "_", "-", "+", "=", "@", ",". No "%" (no encoded
// spellings), no "~" (no home directories), no spaces, no control characters, no "\\", ":" or
// other shell or URL specials.
const SEGMENT = /^[A-Za-z0-9._+=@,-]+$/;

/**
 * Checks a "/"-separated path relative to a directory the agent owns, and returns its segments.
 * @throws PathRejected naming the broken rule, never echoing more than the rule.
 */
export function checkRelativePath(value: string, what = "path"): string[] {
  if (value === "") throw new PathRejected(`${what} is empty`);
  if (Buffer.byteLength(value, "utf8") > MAX_RELATIVE_PATH_BYTES) throw new PathRejected(`${what} is longer than ${MAX_RELATIVE_PATH_BYTES} bytes`);
  if (value.startsWith("/")) throw new PathRejected(`${what} must be relative`);
  const segments = value.split("/");
  if (segments.length > MAX_RELATIVE_PATH_DEPTH) throw new PathRejected(`${what} is deeper than ${MAX_RELATIVE_PATH_DEPTH} segments`);
  for (const segment of segments) {
    if (segment === "") throw new PathRejected(`${what} has an empty segment`);
    if (segment === "." || segment === "..") throw new PathRejected(`${what} has a "${segment}" segment`);
    if (!SEGMENT.test(segment)) throw new PathRejected(`${what} has a character outside the portable set`);
    if (segment.toLowerCase() === ".git") throw new PathRejected(`${what} has a ".git" segment`);
    if (segment.length > MAX_SEGMENT_BYTES) throw new PathRejected(`${what} has a segment longer than ${MAX_SEGMENT_BYTES} bytes`);
  }
  return segments;
}

/** A repository is "owner/name": exactly two segments of the same grammar. */
export function checkRepository(value: string): string[] {
  const segments = checkRelativePath(value, "repository");
  if (segments.length !== 2) throw new PathRejected("repository must be owner/name");
  // Leading dots are not repository names, and keep the agent's own ".partial" area apart.
  if (segments.some((s) => s.startsWith("."))) throw new PathRejected("repository owner and name must not start with \".\"");
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
