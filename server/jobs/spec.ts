// Validation of typed job messages before they are stored, leased or accepted from an agent.
//
// Pure functions: no I/O, no clock. Every failure is a JobSpecError naming the offending field by
// its proto path (snake_case proto names, zero-based list indexes), for example
// `spec.artifact_acquire.files[2].sha256`, so an operator or client can find it in their request.
// Messages never echo payloads; they name the rule that was broken.

import { Buffer } from "node:buffer";
import path from "node:path";
import type { Duration } from "@bufbuild/protobuf/wkt";
import {
  CapabilityError,
  capabilityOfResult,
  capabilityOfSpecCase,
  specFieldNameOfCase,
  type JobSpecCase,
} from "../../common/capabilities.js";
import { absoluteArtifactPathProblem, relativeArtifactPathProblem } from "../../common/paths.js";
import { MAX_COMMIT_FILES } from "../../common/artifacts.js";
import { EngineKind, ProbeInput } from "../../gen/proto/modelforge/jobs/v1/jobs_pb.js";
import type {
  ArtifactAcquire,
  ArtifactAcquireResult,
  DeploymentLoad,
  DeploymentInvoke,
  JobProgress,
  JobResult,
  JobSpec,
  ResolvedArtifact,
  RuntimeProbe,
} from "../../gen/proto/modelforge/jobs/v1/jobs_pb.js";

/** A job spec, result or progress report breaks a rule of the contract. Maps to invalid_argument. */
export class JobSpecError extends Error {
  override readonly name = "JobSpecError";
  constructor(
    /** Proto path of the offending field, e.g. `spec.artifact_acquire.files[2].sha256`. */
    readonly field: string,
    reason: string,
  ) {
    super(`${field}: ${reason}`);
  }
}

export interface JobSpecContext {
  /** Absolute directories on nodes that artifacts may be written to and read from. */
  approvedRoots: string[];
}

/** Largest deployment.invoke.v1 payload relayed to a node: 4 MiB. */
export const MAX_INVOKE_PAYLOAD_BYTES = 4 * 1024 * 1024;
/** Default bound on a progress message (the proto documents 256 bytes). */
export const DEFAULT_MAX_PROGRESS_MESSAGE_BYTES = 256;

const SHA256 = /^[0-9a-f]{64}$/;
const COMMIT = /^[0-9a-f]{40}$/;
const REPOSITORY = /^[A-Za-z0-9._-]+\/[A-Za-z0-9._-]+$/;

function fail(field: string, reason: string): never {
  throw new JobSpecError(field, reason);
}

function requireText(value: string, field: string): void {
  if (value.trim() === "") fail(field, "is required and must not be blank");
}

export function checkSha256(value: string, field: string): void {
  if (SHA256.test(value)) return;
  if (/^[0-9a-fA-F]{64}$/.test(value)) fail(field, "must be lowercase hex: write the SHA-256 digest in lowercase");
  if (value === "") fail(field, "is required: the SHA-256 digest as 64 lowercase hex digits");
  fail(field, `must be a SHA-256 digest of exactly 64 lowercase hex digits (got ${value.length} characters)`);
}

export function checkCommit(value: string, field: string): void {
  if (COMMIT.test(value)) return;
  if (value === "") fail(field, "is required: the exact commit as 40 lowercase hex digits");
  if (/^[0-9a-fA-F]{40}$/.test(value)) fail(field, "must be lowercase hex: write the commit id in lowercase");
  if (/^[0-9a-fA-F]{4,39}$/.test(value)) {
    fail(field, `looks like a short commit id (${value.length} digits); the full 40-digit commit is required`);
  }
  fail(field, "must be an exact commit (40 lowercase hex digits); branch and tag names are not accepted");
}

export function checkRepository(value: string, field: string): void {
  if (value === "") fail(field, "is required, in the form owner/name");
  if (!REPOSITORY.test(value)) {
    fail(field, 'must have the form owner/name: letters, digits, "-", "_" and "." with exactly one "/"');
  }
  // "." and ".." are path segments, not names; they would turn the repository into a path traversal.
  for (const part of value.split("/")) {
    if (/^\.+$/.test(part)) fail(field, "owner and name must not consist only of dots");
  }
}

/** A file path inside an artifact directory: the contract's artifact path grammar (common/paths.ts). */
export function checkRelativePath(value: string, field: string): void {
  if (value === "") fail(field, "is required");
  const problem = relativeArtifactPathProblem(value);
  if (problem !== undefined) fail(field, problem);
}

/** `path.posix.normalize`, minus any trailing "/" (except for the file system root itself). */
function normalise(p: string): string {
  const n = path.posix.normalize(p);
  return n.length > 1 && n.endsWith("/") ? n.slice(0, -1) : n;
}

function normalisedRoots(ctx: JobSpecContext): string[] {
  // A relative root is a configuration mistake; it never contains anything.
  return ctx.approvedRoots.filter((root) => root.startsWith("/")).map(normalise);
}

function isInside(candidate: string, root: string): boolean {
  if (root === "/") return candidate !== "/";
  return candidate.startsWith(`${root}/`);
}

/**
 * An absolute, server-resolved path on a node that lies strictly inside an approved root.
 *
 * Containment is decided on the `path.posix.normalize`d form, so `/models/../etc/passwd` is named
 * as an escape. Beyond that the path must already be canonical: a ".." that stays inside the root
 * lexically may still leave it on the node through a symlink, since the kernel resolves "link/.."
 * physically; the server resolves these paths itself, so it can always send the canonical form.
 */
function checkResolvedPath(value: string, field: string, roots: string[]): void {
  if (value === "") fail(field, "is required");
  if (value.includes("\0")) fail(field, "must not contain a NUL character");
  if (value.includes("\\")) fail(field, 'must use "/" as separator; "\\" is not allowed');
  if (!value.startsWith("/")) fail(field, "must be an absolute path inside an approved root");
  const normal = normalise(value);
  if (!roots.some((root) => isInside(normal, root))) {
    fail(field, "must lie inside one of the approved roots (after normalisation it does not)");
  }
  if (normal !== value) {
    fail(field, 'must be in canonical form: no "..", "." or empty segments and no trailing "/"');
  }
  const problem = absoluteArtifactPathProblem(value);
  if (problem !== undefined) fail(field, problem);
}

function checkResolvedArtifacts(artifacts: ResolvedArtifact[], at: string, ctx: JobSpecContext): void {
  if (artifacts.length === 0) fail(at, "at least one artifact is required");
  if (artifacts.length > MAX_COMMIT_FILES) fail(at, `at most ${MAX_COMMIT_FILES} artifacts, the most files a commit holds`);
  const roots = normalisedRoots(ctx);
  artifacts.forEach((artifact, i) => {
    checkResolvedPath(artifact.path, `${at}[${i}].path`, roots);
    checkSha256(artifact.sha256, `${at}[${i}].sha256`);
  });
}

/** A model file, when named, is exactly one of the job's artifacts: the agent loads nothing else. */
function checkModelFile(v: { modelFile: string; artifacts: ResolvedArtifact[] }, at: string): void {
  if (v.modelFile !== "" && !v.artifacts.some((a) => a.path === v.modelFile)) {
    fail(`${at}.model_file`, "must be exactly the path of one of the artifacts");
  }
}

/** When set, a duration must be well-formed and strictly positive. */
function checkOptionalPositiveDuration(value: Duration | undefined, field: string): void {
  if (value === undefined) return;
  const { seconds, nanos } = value;
  if (seconds < 0n || nanos < 0 || nanos > 999_999_999 || !Number.isInteger(nanos)) {
    fail(field, "must be a well-formed, non-negative duration");
  }
  if (seconds === 0n && nanos === 0) fail(field, "must be positive when set (leave it unset for the default)");
}

function checkArtifactAcquire(v: ArtifactAcquire, at: string, ctx: JobSpecContext): void {
  checkRepository(v.repository, `${at}.repository`);
  checkCommit(v.commit, `${at}.commit`);
  if (v.files.length === 0) fail(`${at}.files`, "at least one file is required");
  // The edge bounds a request's list; this also holds for the jobs the deployment controller builds.
  if (v.files.length > MAX_COMMIT_FILES) fail(`${at}.files`, `at most ${MAX_COMMIT_FILES} files, the most a commit holds`);
  const firstIndexOf = new Map<string, number>();
  v.files.forEach((file, i) => {
    const f = `${at}.files[${i}]`;
    checkRelativePath(file.path, `${f}.path`);
    const earlier = firstIndexOf.get(file.path);
    if (earlier !== undefined) fail(`${f}.path`, `duplicates files[${earlier}].path`);
    firstIndexOf.set(file.path, i);
    if (file.sizeBytes <= 0n) fail(`${f}.size_bytes`, "must be greater than zero");
    checkSha256(file.sha256, `${f}.sha256`);
  });
  if (v.targetRoot === "") fail(`${at}.target_root`, "is required: one of the approved roots");
  if (!ctx.approvedRoots.includes(v.targetRoot)) {
    fail(`${at}.target_root`, `must be exactly one of the approved roots (${ctx.approvedRoots.join(", ") || "none configured"})`);
  }
  // An unset reserve means "no extra reserve beyond the agent's own floor".
  if (v.reserve && v.reserve.minFreePercent > 100) {
    fail(`${at}.reserve.min_free_percent`, "must be between 0 and 100");
  }
}

function checkRuntimeProbe(v: RuntimeProbe, at: string, ctx: JobSpecContext): void {
  requireText(v.runtimeProfile, `${at}.runtime_profile`);
  requireText(v.runtimeEnvironment, `${at}.runtime_environment`);
  checkResolvedArtifacts(v.artifacts, `${at}.artifacts`, ctx);
  checkModelFile(v, at);
  requireText(v.probeInputId, `${at}.probe_input_id`);
  // The resolved profile is optional for older clients, but when present it must name an engine
  // and carry its content hash: the agent acts on it without any free text.
  if (v.profile !== undefined) {
    if (!(v.profile.engine in EngineKind) || v.profile.engine === EngineKind.UNSPECIFIED) {
      fail(`${at}.profile.engine`, "must name an engine (llama.cpp or openai-http)");
    }
    checkSha256(v.profile.contentHash, `${at}.profile.content_hash`);
  }
  if (!(v.probeInput in ProbeInput)) fail(`${at}.probe_input`, "must be one of the contract's fixed probe inputs");
}

function checkDeploymentLoad(v: DeploymentLoad, at: string, ctx: JobSpecContext): void {
  requireText(v.deploymentId, `${at}.deployment_id`);
  if (v.revision < 1n) fail(`${at}.revision`, "must be at least 1");
  requireText(v.runtimeProfile, `${at}.runtime_profile`);
  checkResolvedArtifacts(v.artifacts, `${at}.artifacts`, ctx);
  checkModelFile(v, at);
}

function checkDeploymentInvoke(v: DeploymentInvoke, at: string): void {
  requireText(v.deploymentId, `${at}.deployment_id`);
  requireText(v.contentType, `${at}.content_type`);
  if (v.payload.byteLength > MAX_INVOKE_PAYLOAD_BYTES) {
    fail(`${at}.payload`, `is ${v.payload.byteLength} bytes; at most ${MAX_INVOKE_PAYLOAD_BYTES} bytes (4 MiB) are relayed`);
  }
  checkOptionalPositiveDuration(v.timeout, `${at}.timeout`);
}

/**
 * Check a job spec against the rules of its capability.
 * @throws JobSpecError naming the first offending field.
 */
export function validateJobSpec(spec: JobSpec, ctx: JobSpecContext): void {
  const kind = spec.kind;
  if (kind.case === undefined) fail("spec.kind", "exactly one capability must be set; none is");
  let at: string;
  try {
    at = `spec.${specFieldNameOfCase(kind.case)}`;
  } catch (err) {
    if (err instanceof CapabilityError) fail("spec.kind", `unknown capability case "${String(kind.case)}"`);
    throw err;
  }
  if (kind.value == null) fail(at, "the capability is selected but carries no message");

  switch (kind.case) {
    case "artifactAcquire":
      return checkArtifactAcquire(kind.value, at, ctx);
    case "runtimeProbe":
      return checkRuntimeProbe(kind.value, at, ctx);
    case "runtimeHealth":
    case "runtimeUnload":
      return requireText(kind.value.runtimeId, `${at}.runtime_id`);
    case "deploymentLoad":
      return checkDeploymentLoad(kind.value, at, ctx);
    case "deploymentInvoke":
      return checkDeploymentInvoke(kind.value, at);
    case "deploymentHealth":
    case "deploymentUnload":
      return requireText(kind.value.deploymentId, `${at}.deployment_id`);
    case "deploymentDrain":
      requireText(kind.value.deploymentId, `${at}.deployment_id`);
      return checkOptionalPositiveDuration(kind.value.timeout, `${at}.timeout`);
    default: {
      // A new capability in the proto fails type-checking here until it has rules.
      const unhandled: never = kind;
      void unhandled;
      fail("spec.kind", "capability has no validation rules");
    }
  }
}

/**
 * Check that a result answers the job's capability (runtime.health.v1 and deployment.health.v1
 * share a message type, so this compares oneof cases through their capability names).
 * @throws JobSpecError with field `result` (or `spec.kind` if the spec itself names nothing).
 */
export function validateJobResult(spec: JobSpec, result: JobResult): void {
  const kase: JobSpecCase | undefined = spec.kind.case;
  if (kase === undefined) fail("spec.kind", "exactly one capability must be set; none is");
  let expected: string;
  try {
    expected = capabilityOfSpecCase(kase);
  } catch (err) {
    if (err instanceof CapabilityError) fail("spec.kind", `unknown capability case "${String(kase)}"`);
    throw err;
  }
  const actual = capabilityOfResult(result);
  if (actual === undefined) fail("result", `no result case is set; the job expects a ${expected} result`);
  if (actual !== expected) fail("result", `is a ${actual} result, but the job is ${expected}`);
  if (spec.kind.case === "artifactAcquire" && result.result.case === "artifactAcquire") {
    checkAcquireResult(spec.kind.value, result.result.value);
  }
}

/**
 * An acquisition is accepted only when its report is the spec's inventory exactly (every file,
 * with the spec's size and digest, nothing else) in the directory the spec implies.
 */
function checkAcquireResult(spec: ArtifactAcquire, result: ArtifactAcquireResult): void {
  const at = "result.artifact_acquire";
  const expectedDir = path.posix.join(spec.targetRoot, spec.repository, spec.commit);
  if (result.path !== expectedDir) fail(`${at}.path`, "must be <target_root>/<repository>/<commit> of the job");
  if (result.files.length !== spec.files.length) {
    fail(`${at}.files`, `reports ${result.files.length} files; the job names ${spec.files.length}`);
  }
  const wanted = new Map(spec.files.map((f) => [f.path, f]));
  const seen = new Set<string>();
  let total = 0n;
  result.files.forEach((file, i) => {
    const expected = wanted.get(file.path);
    if (expected === undefined) fail(`${at}.files[${i}].path`, "is not a file of the job");
    if (seen.has(file.path)) fail(`${at}.files[${i}].path`, "is reported twice");
    seen.add(file.path);
    if (file.sizeBytes !== expected.sizeBytes) fail(`${at}.files[${i}].size_bytes`, "differs from the job");
    if (file.sha256 !== expected.sha256) fail(`${at}.files[${i}].sha256`, "differs from the job");
    total += file.sizeBytes;
  });
  if (result.bytesWritten + result.bytesReused > total) {
    fail(`${at}.bytes_written`, "with bytes_reused exceeds the size of the files");
  }
}

/**
 * Check a progress report's bounds.
 * @throws JobSpecError with field `progress.<name>`.
 */
export function validateProgress(progress: JobProgress, maxMessageBytes: number = DEFAULT_MAX_PROGRESS_MESSAGE_BYTES): void {
  if (!Number.isFinite(progress.percent) || progress.percent < 0 || progress.percent > 100) {
    fail("progress.percent", "must be a finite number from 0 to 100");
  }
  const bytes = Buffer.byteLength(progress.message, "utf8");
  if (bytes > maxMessageBytes) {
    fail("progress.message", `is ${bytes} bytes of UTF-8; at most ${maxMessageBytes} bytes are accepted`);
  }
  if (progress.bytesTotal > 0n && progress.bytesDone > progress.bytesTotal) {
    fail("progress.bytes_done", "must not exceed bytes_total");
  }
}
