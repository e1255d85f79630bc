// The artifact path grammar (common/paths.ts): paths that only look safe are refused with the
// rule they break; ordinary model repository file names pass.
import { create } from "@bufbuild/protobuf";
import { describe, expect, it } from "vitest";
import { absoluteArtifactPathProblem, jobSpecPathProblem, relativeArtifactPathProblem } from "../../../common/paths.js";
import { JobSpecSchema } from "../../../gen/proto/modelforge/jobs/v1/jobs_pb.js";

describe("relative artifact paths", () => {
  const refused: [label: string, path: string, reason: RegExp][] = [
    ["percent-encoded traversal", "%2e%2e/%2e%2e/etc/passwd", /"%"/],
    ["percent-encoded slash", "a%2fb", /"%"/],
    ["ONE DOT LEADER pair", "\u2024\u2024/etc/passwd", /U\+2024/],
    ["fullwidth full stops", "\uff0e\uff0e/etc/passwd", /U\+FF0E/],
    ["home shorthand", "~/.ssh/authorized_keys", /"~"/],
    ["tilde user", "~root/x", /"~"/],
    ["git hooks", ".git/hooks/pre-commit", /starting with "\."/],
    ["nested hidden directory", "models/.git/config", /starting with "\."/],
    ["dotfile", ".env", /starting with "\."/],
    ["dot-dot", "a/../../b", /"\.\." segment/],
    ["dot", "./config.json", /"\." segment/],
    ["newline", "config.json\nx", /control character U\+000A/],
    ["carriage return", "a\rb", /U\+000D/],
    ["NUL", "a\0b", /NUL/],
    ["DEL", "a\x7fb", /control character U\+007F/],
    ["C1 control", "a\u0085b", /control character U\+0085/],
    ["backslash traversal", "a\\..\\windows", /"\\"/],
    ["absolute", "/etc/passwd", /relative/],
    ["empty", "", /empty/],
    ["empty segment", "a//b", /empty segment/],
    ["trailing slash", "a/", /empty segment/],
    ["space", "my model.bin", /U\+0020/],
    ["combining accent (NFD)", "cafe\u0301.txt", /U\+0301/],
    ["precomposed accent (NFC)", "caf\u00e9.txt", /U\+00E9/],
    ["right-to-left override", "a\u202egnp.exe", /U\+202E/],
    ["too long", "a".repeat(1025), /1024/],
    ["too deep", Array(33).fill("d").join("/"), /32 segments/],
    ["long segment", "x".repeat(256), /255/],
  ];

  it.each(refused)("refuses %s", (_label, path, reason) => {
    expect(relativeArtifactPathProblem(path)).toMatch(reason);
  });

  const accepted = [
    "config.json",
    "model-00001-of-00002.safetensors",
    "1_Pooling/config.json",
    "onnx/model_quantized.onnx",
    "x..y",
    "-leading-dash",
    Array(5).fill("a".repeat(204)).join("/"),
    Array(32).fill("d").join("/"),
  ];

  it.each(accepted)("accepts %j", (path) => {
    expect(relativeArtifactPathProblem(path)).toBeUndefined();
  });
});

describe("absolute artifact paths", () => {
  it('are "/" plus the same grammar', () => {
    expect(absoluteArtifactPathProblem("/srv/models/org/model/weights.bin")).toBeUndefined();
    expect(absoluteArtifactPathProblem("srv/models")).toMatch(/absolute/);
    expect(absoluteArtifactPathProblem("/srv/models/.git/config")).toMatch(/starting with "\."/);
    expect(absoluteArtifactPathProblem("/srv/models/%2e%2e/x")).toMatch(/"%"/);
  });
});

describe("job spec paths", () => {
  const sha = "a".repeat(64);
  it("names the first offending field of an acquisition", () => {
    const spec = create(JobSpecSchema, {
      kind: {
        case: "artifactAcquire",
        value: {
          targetRoot: "/srv/models",
          files: [
            { path: "ok.bin", sha256: sha },
            { path: "~/.ssh/x", sha256: sha },
          ],
        },
      },
    });
    expect(jobSpecPathProblem(spec)).toMatch(/^spec\.artifact_acquire\.files\[1\]\.path: .*"~"/);
  });

  it("checks resolved artifact paths and target roots", () => {
    const load = create(JobSpecSchema, {
      kind: { case: "deploymentLoad", value: { artifacts: [{ path: "/srv/models/\uff0e\uff0e/x", sha256: sha }] } },
    });
    expect(jobSpecPathProblem(load)).toMatch(/^spec\.deployment_load\.artifacts\[0\]\.path: /);
    const root = create(JobSpecSchema, { kind: { case: "artifactAcquire", value: { targetRoot: "relative", files: [] } } });
    expect(jobSpecPathProblem(root)).toMatch(/^spec\.artifact_acquire\.target_root: .*absolute/);
  });

  it("has nothing to say about capabilities without paths", () => {
    expect(jobSpecPathProblem(create(JobSpecSchema, { kind: { case: "runtimeHealth", value: { runtimeId: "r" } } }))).toBeUndefined();
  });
});
