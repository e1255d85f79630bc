// The artifact path grammar of the contract (proto/modelforge/jobs/v1/jobs.proto, ArtifactFile.path).
// The server checks it before a job is stored, and the agent checks it again before a lease's
// handler runs, so neither trusts the other to have done it.
//
//   path    = segment *( "/" segment )        at most 1024 bytes and 32 segments
//   segment = first *254( char )              "." and ".." are therefore impossible
//   first   = ALPHA / DIGIT / "_" / "-"       no hidden names: ".git", ".ssh", ".env", ...
//   char    = ALPHA / DIGIT / "_" / "-" / "."
//
// Only the POSIX portable file name characters, so a path means the same to every file system,
// shell and URL on the way: no "%" (nothing is percent-decoded, so "%2e%2e" cannot become ".."),
// no "~", no "\", no control characters, no look-alike dots (U+2024, U+FF0E) and nothing that
// Unicode normalisation could change. Pure functions; each answer names the rule that was broken.
import type { JobSpec } from "../gen/proto/modelforge/jobs/v1/jobs_pb.js";

export const MAX_ARTIFACT_PATH_BYTES = 1024;
export const MAX_ARTIFACT_PATH_SEGMENTS = 32;
export const MAX_ARTIFACT_SEGMENT_BYTES = 255;
/** An absolute path is a root (itself a path of this grammar) plus a relative path. */
export const MAX_ABSOLUTE_PATH_BYTES = 4096;
export const MAX_ABSOLUTE_PATH_SEGMENTS = 64;

const SEGMENT = /^[A-Za-z0-9_-][A-Za-z0-9._-]*$/;

/** Why a character is outside the grammar, in words an operator recognises. */
function describeCharacter(ch: string): string {
  const code = ch.codePointAt(0)!;
  const hex = `U+${code.toString(16).toUpperCase().padStart(4, "0")}`;
  if (code === 0) return "contains a NUL character (U+0000)";
  if (ch === "%") return 'contains "%": percent-encoding is not decoded, write the name itself';
  if (ch === "\\") return 'contains "\\": use "/" as the only separator';
  if (ch === "~") return 'contains "~": home-directory shorthand is not a file name';
  if (code < 0x20 || (code >= 0x7f && code < 0xa0)) return `contains the control character ${hex}`;
  return `contains ${hex}, which is outside the portable set [A-Za-z0-9._-]`;
}

function segmentProblem(segment: string): string | undefined {
  if (segment === "") return 'has an empty segment ("//", or a leading or trailing "/")';
  if (segment === "." || segment === "..") return `has a "${segment}" segment`;
  if (segment.startsWith("."))
    return `has a segment starting with "." ("${segment.slice(0, 16)}"): hidden names such as .git are not artifact files`;
  if (segment.length > MAX_ARTIFACT_SEGMENT_BYTES) return `has a segment longer than ${MAX_ARTIFACT_SEGMENT_BYTES} bytes`;
  if (SEGMENT.test(segment)) return undefined;
  for (const ch of segment) {
    if (!/[A-Za-z0-9._-]/.test(ch)) return describeCharacter(ch);
  }
  return "has a segment outside the grammar";
}

/**
 * Checks a path relative to an artifact directory against the grammar.
 * @returns why it is refused, or undefined when it is acceptable.
 */
export function relativeArtifactPathProblem(path: string): string | undefined {
  if (path.startsWith("/")) return 'must be relative, not start with "/"';
  return pathProblem(path, MAX_ARTIFACT_PATH_BYTES, MAX_ARTIFACT_PATH_SEGMENTS);
}

function pathProblem(path: string, maxBytes: number, maxSegments: number): string | undefined {
  if (path === "") return "is empty";
  // Length first, on the UTF-16 length (never more than the UTF-8 length of what is accepted), so
  // a huge string is not split and scanned.
  if (path.length > maxBytes) return `is longer than ${maxBytes} bytes`;
  const segments = path.split("/");
  if (segments.length > maxSegments) return `has more than ${maxSegments} segments`;
  for (const segment of segments) {
    const problem = segmentProblem(segment);
    if (problem !== undefined) return problem;
  }
  return undefined;
}

/**
 * Checks an absolute path on a node (an approved root, or a file resolved inside one): "/" followed
 * by segments of the same grammar, with room for the root in front of a relative path.
 */
export function absoluteArtifactPathProblem(path: string): string | undefined {
  if (!path.startsWith("/")) return 'must be absolute (start with "/")';
  return pathProblem(path.slice(1), MAX_ABSOLUTE_PATH_BYTES, MAX_ABSOLUTE_PATH_SEGMENTS);
}

/**
 * The first path of a job spec that breaks the grammar, as `field: reason` with the field's proto
 * path (e.g. `spec.artifact_acquire.files[2].path`), or undefined when every path is acceptable.
 */
export function jobSpecPathProblem(spec: JobSpec): string | undefined {
  const kind = spec.kind;
  const check = (value: string, field: string, problemOf: (p: string) => string | undefined) => {
    const problem = problemOf(value);
    return problem === undefined ? undefined : `${field}: ${problem}`;
  };
  switch (kind.case) {
    case "artifactAcquire": {
      const at = "spec.artifact_acquire";
      for (const [i, file] of kind.value.files.entries()) {
        const problem = check(file.path, `${at}.files[${i}].path`, relativeArtifactPathProblem);
        if (problem !== undefined) return problem;
      }
      return check(kind.value.targetRoot, `${at}.target_root`, absoluteArtifactPathProblem);
    }
    case "runtimeProbe":
    case "deploymentLoad": {
      const at = kind.case === "runtimeProbe" ? "spec.runtime_probe" : "spec.deployment_load";
      for (const [i, artifact] of kind.value.artifacts.entries()) {
        const problem = check(artifact.path, `${at}.artifacts[${i}].path`, absoluteArtifactPathProblem);
        if (problem !== undefined) return problem;
      }
      return undefined;
    }
    default:
      return undefined;
  }
}
