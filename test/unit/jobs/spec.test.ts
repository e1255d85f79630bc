import { create } from "@bufbuild/protobuf";
import { DurationSchema } from "@bufbuild/protobuf/wkt";
import { describe, expect, it } from "vitest";
import { MAX_COMMIT_FILES } from "../../../common/artifacts.js";
import { JobSpecError, MAX_INVOKE_PAYLOAD_BYTES, validateJobResult, validateJobSpec, validateProgress } from "../../../server/jobs/spec.js";
import {
  ArtifactAcquireSchema,
  DeploymentDrainSchema,
  DeploymentHealthSchema,
  DeploymentInvokeSchema,
  DeploymentLoadSchema,
  DeploymentUnloadSchema,
  HealthResultSchema,
  JobProgressSchema,
  JobResultSchema,
  JobSpecSchema,
  RuntimeHealthSchema,
  RuntimeProbeSchema,
  ResolvedArtifactSchema,
  RuntimeUnloadSchema,
  UnloadResultSchema,
  type ArtifactAcquire,
  type DeploymentDrain,
  type DeploymentInvoke,
  type DeploymentLoad,
  type JobProgress,
  type JobSpec,
  type RuntimeProbe,
} from "../../../gen/proto/modelforge/jobs/v1/jobs_pb.js";

const ROOTS = ["/srv/models", "/data/cache/"];
const ctx = { approvedRoots: ROOTS };
const SHA = "ab".repeat(32);
const COMMIT = "0123456789abcdef0123456789abcdef01234567";

function acquire(): ArtifactAcquire {
  return create(ArtifactAcquireSchema, {
    repository: "org-1/model_v2.5",
    commit: COMMIT,
    files: [
      { path: "config.json", sizeBytes: 10n, sha256: SHA },
      { path: "weights/part-1.safetensors", sizeBytes: 1n << 33n, sha256: SHA },
      { path: "tokenizer/tokenizer.json", sizeBytes: 5n, sha256: SHA },
    ],
    targetRoot: "/srv/models",
    reserve: { minFreeBytes: 1n << 30n, minFreePercent: 10 },
  });
}

function probe(): RuntimeProbe {
  return create(RuntimeProbeSchema, {
    runtimeProfile: "vllm-0.6-fp16",
    runtimeEnvironment: "cuda12.4-py3.11",
    artifacts: [
      { path: "/srv/models/org/model/config.json", sha256: SHA },
      { path: "/data/cache/x/weights.bin", sha256: SHA },
    ],
    probeInputId: "probe-small-1",
  });
}

function load(): DeploymentLoad {
  return create(DeploymentLoadSchema, {
    deploymentId: "dep-1",
    revision: 3n,
    runtimeProfile: "vllm-0.6-fp16",
    artifacts: [{ path: "/srv/models/org/model/weights.bin", sha256: SHA }],
  });
}

function invoke(): DeploymentInvoke {
  return create(DeploymentInvokeSchema, {
    deploymentId: "dep-1",
    requestId: "req-1",
    contentType: "application/json",
    payload: new TextEncoder().encode('{"x":1}'),
    timeout: { seconds: 30n },
  });
}

function drain(): DeploymentDrain {
  return create(DeploymentDrainSchema, { deploymentId: "dep-1", timeout: { seconds: 0n, nanos: 5 } });
}

const spec = (kind: JobSpec["kind"]): JobSpec => create(JobSpecSchema, { kind });

function errorOf(fn: () => void): JobSpecError {
  try {
    fn();
  } catch (err) {
    expect(err).toBeInstanceOf(JobSpecError);
    return err as JobSpecError;
  }
  throw new Error("expected a JobSpecError, nothing was thrown");
}

type Row<T> = [label: string, mutate: (v: T) => void, field: string, message: RegExp];

describe("validateJobSpec", () => {
  it("accepts a valid spec of every capability", () => {
    const specs: JobSpec[] = [
      spec({ case: "artifactAcquire", value: acquire() }),
      spec({ case: "runtimeProbe", value: probe() }),
      spec({ case: "runtimeHealth", value: create(RuntimeHealthSchema, { runtimeId: "rt-1" }) }),
      spec({ case: "runtimeUnload", value: create(RuntimeUnloadSchema, { runtimeId: "rt-1" }) }),
      spec({ case: "deploymentLoad", value: load() }),
      spec({ case: "deploymentInvoke", value: invoke() }),
      spec({ case: "deploymentHealth", value: create(DeploymentHealthSchema, { deploymentId: "d" }) }),
      spec({ case: "deploymentDrain", value: drain() }),
      spec({ case: "deploymentUnload", value: create(DeploymentUnloadSchema, { deploymentId: "d" }) }),
    ];
    expect(specs.map((s) => s.kind.case)).toHaveLength(9);
    for (const s of specs) expect(() => validateJobSpec(s, ctx), s.kind.case).not.toThrow();
  });

  it("accepts optional parts left unset", () => {
    const a = acquire();
    a.reserve = undefined;
    expect(() => validateJobSpec(spec({ case: "artifactAcquire", value: a }), ctx)).not.toThrow();
    const d = drain();
    d.timeout = undefined;
    expect(() => validateJobSpec(spec({ case: "deploymentDrain", value: d }), ctx)).not.toThrow();
    const i = invoke();
    i.timeout = undefined;
    i.payload = new Uint8Array(MAX_INVOKE_PAYLOAD_BYTES);
    expect(() => validateJobSpec(spec({ case: "deploymentInvoke", value: i }), ctx)).not.toThrow();
  });

  it("requires exactly one case", () => {
    const e = errorOf(() => validateJobSpec(create(JobSpecSchema), ctx));
    expect(e.field).toBe("spec.kind");
    expect(e.message).toMatch(/exactly one capability/);
    const bogus = { kind: { case: "shellExec", value: {} } } as unknown as JobSpec;
    expect(errorOf(() => validateJobSpec(bogus, ctx)).field).toBe("spec.kind");
  });

  const A = "spec.artifact_acquire";
  const acquireRows: Row<ArtifactAcquire>[] = [
    ["empty repository", (v) => (v.repository = ""), `${A}.repository`, /required/],
    ["repository without slash", (v) => (v.repository = "model"), `${A}.repository`, /owner\/name/],
    ["repository with two slashes", (v) => (v.repository = "a/b/c"), `${A}.repository`, /owner\/name/],
    ["repository with space", (v) => (v.repository = "org/my model"), `${A}.repository`, /owner\/name/],
    ["repository with leading slash", (v) => (v.repository = "/model"), `${A}.repository`, /owner\/name/],
    ["repository URL", (v) => (v.repository = "https://hf.co/a/b"), `${A}.repository`, /owner\/name/],
    ["repository of dots", (v) => (v.repository = "../etc"), `${A}.repository`, /dots/],
    ["empty commit", (v) => (v.commit = ""), `${A}.commit`, /required/],
    ["branch name", (v) => (v.commit = "main"), `${A}.commit`, /branch/],
    ["tag name", (v) => (v.commit = "v1.0.0"), `${A}.commit`, /branch and tag/],
    ["short sha", (v) => (v.commit = "0123abc"), `${A}.commit`, /short commit/],
    ["41 hex digits", (v) => (v.commit = `${COMMIT}0`), `${A}.commit`, /40 lowercase hex/],
    ["uppercase commit", (v) => (v.commit = COMMIT.toUpperCase()), `${A}.commit`, /lowercase/],
    ["no files", (v) => (v.files = []), `${A}.files`, /at least one file/],
    ["absolute file path", (v) => (v.files[2]!.path = "/etc/passwd"), `${A}.files[2].path`, /relative/],
    ["backslash", (v) => (v.files[1]!.path = "weights\\a.bin"), `${A}.files[1].path`, /"\\"/],
    ["dot-dot segment", (v) => (v.files[2]!.path = "a/../../b"), `${A}.files[2].path`, /"\.\."/],
    ["bare dot-dot", (v) => (v.files[0]!.path = ".."), `${A}.files[0].path`, /"\.\."/],
    ["dot segment", (v) => (v.files[0]!.path = "./config.json"), `${A}.files[0].path`, /"\."/],
    ["empty segment", (v) => (v.files[1]!.path = "weights//a.bin"), `${A}.files[1].path`, /empty segment/],
    ["trailing slash", (v) => (v.files[1]!.path = "weights/"), `${A}.files[1].path`, /empty segment/],
    ["empty path", (v) => (v.files[0]!.path = ""), `${A}.files[0].path`, /required/],
    ["NUL in path", (v) => (v.files[0]!.path = "a\0b"), `${A}.files[0].path`, /NUL/],
    ["path too long", (v) => (v.files[0]!.path = "a".repeat(1025)), `${A}.files[0].path`, /1024/],
    ["percent-encoded dot-dot", (v) => (v.files[0]!.path = "%2e%2e/%2e%2e/etc/passwd"), `${A}.files[0].path`, /"%"/],
    ["hidden VCS directory", (v) => (v.files[0]!.path = ".git/hooks/post-checkout"), `${A}.files[0].path`, /starting with "\."/],
    ["zero size", (v) => (v.files[1]!.sizeBytes = 0n), `${A}.files[1].size_bytes`, /greater than zero/],
    ["short sha256", (v) => (v.files[2]!.sha256 = "abc"), `${A}.files[2].sha256`, /64 lowercase hex/],
    ["empty sha256", (v) => (v.files[2]!.sha256 = ""), `${A}.files[2].sha256`, /required/],
    ["uppercase sha256", (v) => (v.files[2]!.sha256 = SHA.toUpperCase()), `${A}.files[2].sha256`, /lowercase/],
    ["non-hex sha256", (v) => (v.files[0]!.sha256 = "g".repeat(64)), `${A}.files[0].sha256`, /64 lowercase hex/],
    ["duplicate path", (v) => (v.files[2]!.path = "config.json"), `${A}.files[2].path`, /duplicates files\[0\]/],
    ["empty target root", (v) => (v.targetRoot = ""), `${A}.target_root`, /required/],
    ["unapproved target root", (v) => (v.targetRoot = "/tmp"), `${A}.target_root`, /approved roots/],
    ["target root inside a root", (v) => (v.targetRoot = "/srv/models/x"), `${A}.target_root`, /exactly one/],
    ["target root spelled differently", (v) => (v.targetRoot = "/srv/models/"), `${A}.target_root`, /exactly/],
    ["reserve over 100%", (v) => (v.reserve!.minFreePercent = 101), `${A}.reserve.min_free_percent`, /0 and 100/],
    [
      "more files than a commit holds",
      (v) => (v.files = Array.from({ length: MAX_COMMIT_FILES + 1 }, (_, i) => ({ ...v.files[0]!, path: `f${i}` }))),
      `${A}.files`,
      new RegExp(`at most ${MAX_COMMIT_FILES} files`),
    ],
  ];

  it.each(acquireRows)("artifact.acquire.v1: %s", (_label, mutate, field, message) => {
    const v = acquire();
    mutate(v);
    const e = errorOf(() => validateJobSpec(spec({ case: "artifactAcquire", value: v }), ctx));
    expect(e.field).toBe(field);
    expect(e.message).toMatch(message);
    expect(e.message.startsWith(`${field}: `)).toBe(true);
  });

  it("artifact.acquire.v1: accepts boundary values", () => {
    const full = acquire();
    full.files = Array.from({ length: MAX_COMMIT_FILES }, (_, i) => ({ ...full.files[0]!, path: `f${i}` }));
    expect(() => validateJobSpec(spec({ case: "artifactAcquire", value: full }), ctx)).not.toThrow();
    const v = acquire();
    v.files[0]!.path = Array(4).fill("a".repeat(255)).join("/").slice(0, 1024);
    v.files[1]!.path = "x..y/_under-score/x..";
    v.reserve!.minFreePercent = 100;
    v.targetRoot = "/data/cache/";
    expect(() => validateJobSpec(spec({ case: "artifactAcquire", value: v }), ctx)).not.toThrow();
  });

  const artifactRows = (at: string): Row<{ artifacts: RuntimeProbe["artifacts"] }>[] => [
    ["no artifacts", (v) => (v.artifacts = []), at, /at least one artifact/],
    [
      "more artifacts than a commit holds",
      (v) => (v.artifacts = Array.from({ length: MAX_COMMIT_FILES + 1 }, () => ({ ...v.artifacts[0]! }))),
      at,
      new RegExp(`at most ${MAX_COMMIT_FILES} artifacts`),
    ],
    ["relative path", (v) => (v.artifacts[0]!.path = "srv/models/a"), `${at}[0].path`, /absolute/],
    ["empty path", (v) => (v.artifacts[1]!.path = ""), `${at}[1].path`, /required/],
    ["outside roots", (v) => (v.artifacts[0]!.path = "/etc/passwd"), `${at}[0].path`, /inside one of the approved/],
    ["dot-dot escape", (v) => (v.artifacts[0]!.path = "/srv/models/../../etc/shadow"), `${at}[0].path`, /inside/],
    ["sibling with root prefix", (v) => (v.artifacts[0]!.path = "/srv/models-evil/a"), `${at}[0].path`, /inside/],
    ["the root itself", (v) => (v.artifacts[0]!.path = "/srv/models"), `${at}[0].path`, /inside/],
    ["root with trailing slash", (v) => (v.artifacts[0]!.path = "/data/cache/"), `${at}[0].path`, /inside/],
    ["non-canonical but inside", (v) => (v.artifacts[0]!.path = "/srv/models/a/../b"), `${at}[0].path`, /canonical/],
    ["double slash", (v) => (v.artifacts[0]!.path = "/srv/models//b"), `${at}[0].path`, /canonical/],
    ["NUL", (v) => (v.artifacts[0]!.path = "/srv/models/a\0"), `${at}[0].path`, /NUL/],
    ["backslash", (v) => (v.artifacts[0]!.path = "/srv/models\\..\\x"), `${at}[0].path`, /"\\"/],
    ["look-alike dots inside a root", (v) => (v.artifacts[0]!.path = "/srv/models/\u2024\u2024/x"), `${at}[0].path`, /U\+2024/],
    ["hidden file inside a root", (v) => (v.artifacts[0]!.path = "/srv/models/.ssh/id_ed25519"), `${at}[0].path`, /starting with "\."/],
    ["bad sha256", (v) => (v.artifacts[0]!.sha256 = "x"), `${at}[0].sha256`, /64 lowercase hex/],
    ["uppercase sha256", (v) => (v.artifacts[0]!.sha256 = SHA.toUpperCase()), `${at}[0].sha256`, /lowercase/],
  ];

  const P = "spec.runtime_probe";
  const probeRows: Row<RuntimeProbe>[] = [
    ["empty runtime_profile", (v) => (v.runtimeProfile = ""), `${P}.runtime_profile`, /required/],
    ["blank runtime_environment", (v) => (v.runtimeEnvironment = "  "), `${P}.runtime_environment`, /blank/],
    ["empty probe_input_id", (v) => (v.probeInputId = ""), `${P}.probe_input_id`, /required/],
    ["a model_file that is no artifact", (v) => (v.modelFile = "/srv/models/other.gguf"), `${P}.model_file`, /one of the artifacts/],
    ...artifactRows(`${P}.artifacts`),
  ];

  it.each(probeRows)("runtime.probe.v1: %s", (_label, mutate, field, message) => {
    const v = probe();
    mutate(v);
    const e = errorOf(() => validateJobSpec(spec({ case: "runtimeProbe", value: v }), ctx));
    expect(e.field).toBe(field);
    expect(e.message).toMatch(message);
  });

  it("runtime.probe.v1: paths in every approved root are accepted, whatever the root spelling", () => {
    const v = probe();
    v.artifacts[0]!.path = "/data/cache/a/b/c.bin";
    expect(() =>
      validateJobSpec(spec({ case: "runtimeProbe", value: v }), { approvedRoots: ["/srv//models/", "/data/cache"] }),
    ).not.toThrow();
    expect(() => validateJobSpec(spec({ case: "runtimeProbe", value: v }), { approvedRoots: [] })).toThrow(JobSpecError);
  });

  it("runtime.probe.v1 and deployment.load.v1: a model_file that is one of the artifacts is accepted", () => {
    const p = probe();
    p.modelFile = p.artifacts[0]!.path;
    expect(() => validateJobSpec(spec({ case: "runtimeProbe", value: p }), ctx)).not.toThrow();
    const l = load();
    l.modelFile = l.artifacts[0]!.path;
    expect(() => validateJobSpec(spec({ case: "deploymentLoad", value: l }), ctx)).not.toThrow();
  });

  const L = "spec.deployment_load";
  const loadRows: Row<DeploymentLoad>[] = [
    ["empty deployment_id", (v) => (v.deploymentId = ""), `${L}.deployment_id`, /required/],
    ["revision 0", (v) => (v.revision = 0n), `${L}.revision`, /at least 1/],
    ["empty runtime_profile", (v) => (v.runtimeProfile = ""), `${L}.runtime_profile`, /required/],
    ["a model_file that is no artifact", (v) => (v.modelFile = "/data/cache/x.gguf"), `${L}.model_file`, /one of the artifacts/],
    ...artifactRows(`${L}.artifacts`),
  ];

  it.each(loadRows)("deployment.load.v1: %s", (_label, mutate, field, message) => {
    const v = load();
    // Give it a second artifact so the shared rows' indexes 0 and 1 both exist.
    v.artifacts.push(create(ResolvedArtifactSchema, { path: "/data/cache/w.bin", sha256: SHA }));
    mutate(v);
    const e = errorOf(() => validateJobSpec(spec({ case: "deploymentLoad", value: v }), ctx));
    expect(e.field).toBe(field);
    expect(e.message).toMatch(message);
  });

  const I = "spec.deployment_invoke";
  const invokeRows: Row<DeploymentInvoke>[] = [
    ["empty deployment_id", (v) => (v.deploymentId = ""), `${I}.deployment_id`, /required/],
    ["empty content_type", (v) => (v.contentType = ""), `${I}.content_type`, /required/],
    ["payload over 4 MiB", (v) => (v.payload = new Uint8Array(4 * 1024 * 1024 + 1)), `${I}.payload`, /4 MiB/],
    ["zero timeout", (v) => (v.timeout = create(DurationSchema)), `${I}.timeout`, /positive/],
    ["negative timeout", (v) => (v.timeout!.seconds = -1n), `${I}.timeout`, /well-formed/],
  ];

  it.each(invokeRows)("deployment.invoke.v1: %s", (_label, mutate, field, message) => {
    const v = invoke();
    mutate(v);
    const e = errorOf(() => validateJobSpec(spec({ case: "deploymentInvoke", value: v }), ctx));
    expect(e.field).toBe(field);
    expect(e.message).toMatch(message);
  });

  const D = "spec.deployment_drain";
  const drainRows: Row<DeploymentDrain>[] = [
    ["empty deployment_id", (v) => (v.deploymentId = ""), `${D}.deployment_id`, /required/],
    ["zero timeout", (v) => (v.timeout!.nanos = 0), `${D}.timeout`, /positive/],
    [
      "negative seconds",
      (v) => {
        v.timeout!.seconds = -5n;
        v.timeout!.nanos = 0;
      },
      `${D}.timeout`,
      /well-formed/,
    ],
    ["negative nanos", (v) => (v.timeout!.nanos = -1), `${D}.timeout`, /well-formed/],
    ["nanos out of range", (v) => (v.timeout!.nanos = 1_000_000_000), `${D}.timeout`, /well-formed/],
  ];

  it.each(drainRows)("deployment.drain.v1: %s", (_label, mutate, field, message) => {
    const v = drain();
    mutate(v);
    const e = errorOf(() => validateJobSpec(spec({ case: "deploymentDrain", value: v }), ctx));
    expect(e.field).toBe(field);
    expect(e.message).toMatch(message);
  });

  it.each([
    [spec({ case: "runtimeHealth", value: create(RuntimeHealthSchema) }), "spec.runtime_health.runtime_id"],
    [spec({ case: "runtimeUnload", value: create(RuntimeUnloadSchema, { runtimeId: " " }) }), "spec.runtime_unload.runtime_id"],
    [spec({ case: "deploymentHealth", value: create(DeploymentHealthSchema) }), "spec.deployment_health.deployment_id"],
    [spec({ case: "deploymentUnload", value: create(DeploymentUnloadSchema) }), "spec.deployment_unload.deployment_id"],
  ])("identifier-only capabilities require their id (%#)", (s, field) => {
    const e = errorOf(() => validateJobSpec(s, ctx));
    expect(e.field).toBe(field);
    expect(e.message).toMatch(/required/);
  });
});

describe("validateJobResult", () => {
  const healthSpec = spec({ case: "runtimeHealth", value: create(RuntimeHealthSchema, { runtimeId: "rt" }) });

  it("accepts the matching case", () => {
    const result = create(JobResultSchema, { result: { case: "runtimeHealth", value: create(HealthResultSchema) } });
    expect(() => validateJobResult(healthSpec, result)).not.toThrow();
  });

  it.each([
    ["no case", create(JobResultSchema), /no result case.*runtime\.health\.v1/],
    [
      "same message type, other capability",
      create(JobResultSchema, { result: { case: "deploymentHealth", value: create(HealthResultSchema) } }),
      /deployment\.health\.v1 result, but the job is runtime\.health\.v1/,
    ],
    [
      "other capability",
      create(JobResultSchema, { result: { case: "runtimeUnload", value: create(UnloadResultSchema) } }),
      /runtime\.unload\.v1 result/,
    ],
  ])('refuses %s with field "result"', (_label, result, message) => {
    const e = errorOf(() => validateJobResult(healthSpec, result));
    expect(e.field).toBe("result");
    expect(e.message).toMatch(message);
  });

  it("refuses a spec without a case", () => {
    const result = create(JobResultSchema, { result: { case: "runtimeHealth", value: create(HealthResultSchema) } });
    expect(errorOf(() => validateJobResult(create(JobSpecSchema), result)).field).toBe("spec.kind");
  });
});

describe("validateProgress", () => {
  const progress = (init: Partial<Pick<JobProgress, "percent" | "bytesDone" | "bytesTotal" | "message">>) =>
    create(JobProgressSchema, init);

  it.each([
    ["zero", progress({})],
    ["done", progress({ percent: 100, bytesDone: 10n, bytesTotal: 10n })],
    ["unknown total", progress({ percent: 12.5, bytesDone: 999n, bytesTotal: 0n })],
    ["message at the limit", progress({ message: "x".repeat(256) })],
    ["multi-byte at the limit", progress({ message: "é".repeat(128) })],
  ])("accepts %s", (_label, p) => {
    expect(() => validateProgress(p, 256)).not.toThrow();
  });

  it.each([
    ["negative percent", progress({ percent: -0.1 }), "progress.percent"],
    ["percent over 100", progress({ percent: 100.01 }), "progress.percent"],
    ["NaN percent", progress({ percent: Number.NaN }), "progress.percent"],
    ["infinite percent", progress({ percent: Number.POSITIVE_INFINITY }), "progress.percent"],
    ["message over the limit", progress({ message: "x".repeat(257) }), "progress.message"],
    ["multi-byte message over the limit in bytes", progress({ message: "é".repeat(129) }), "progress.message"],
    ["emoji counted in bytes", progress({ message: "🚀".repeat(65) }), "progress.message"],
    ["bytes_done over total", progress({ bytesDone: 11n, bytesTotal: 10n }), "progress.bytes_done"],
  ])("refuses %s", (_label, p, field) => {
    expect(errorOf(() => validateProgress(p, 256)).field).toBe(field);
  });

  it("uses the given byte limit", () => {
    expect(() => validateProgress(progress({ message: "abcd" }), 3)).toThrow(/4 bytes of UTF-8; at most 3/);
    expect(() => validateProgress(progress({ message: "x".repeat(256) }))).not.toThrow();
    expect(() => validateProgress(progress({ message: "x".repeat(257) }))).toThrow(JobSpecError);
  });
});
