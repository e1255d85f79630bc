// Table tests of the pure artifact rules: the agent's path grammar, its source list, the disk
// reserve floor, the server's check of an acquisition report against its spec, and the store's
// bound on a commit's files.
import { describe, expect, it } from "vitest";
import { create } from "@bufbuild/protobuf";
import { JobResultSchema, JobSpecSchema } from "../../../gen/proto/modelforge/jobs/v1/jobs_pb.js";
import { checkDistinctPaths, checkRelativePath, checkRepository, PathRejected } from "../../../agent/capabilities/artifact-paths.js";
import { mirrorUrl, parseContentRange, parseSourceList, SourceConfigError } from "../../../agent/capabilities/artifact-sources.js";
import { reserveFloor } from "../../../agent/capabilities/artifact-acquire.js";
import { artifactRootsFrom } from "../../../agent/capabilities/index.js";
import { JobSpecError, validateJobResult } from "../../../server/jobs/spec.js";
import { checkCommitRoom } from "../../../server/artifacts/rules.js";
import { MAX_COMMIT_FILES } from "../../../common/artifacts.js";
import { Code, ConnectError } from "@connectrpc/connect";

describe("checkRelativePath", () => {
  // The grammar itself is the contract's (common/paths.ts, tested in test/unit/common/paths.test.ts);
  // here: the agent applies it and refuses with PathRejected naming the path's role.
  it.each(["model.gguf", "tokenizer/vocab.json", "a/b/c/d.safetensors", "v1.0-cpu_x", "-dash"])("accepts %j", (p) => {
    expect(checkRelativePath(p)).toEqual(p.split("/"));
  });
  it.each([
    "",
    "/abs",
    "a/../b",
    ".",
    "a//b",
    ".git/HEAD",
    "x/.GIT/config",
    "~/x",
    "a%2e",
    "sp ace",
    "tab\t",
    "back\\slash",
    "ünï",
    "x".repeat(256),
    Array(33).fill("a").join("/"),
    `${"a/".repeat(600)}b`,
  ])("refuses %j", (p) => {
    expect(() => checkRelativePath(p, "files[0].path")).toThrow(PathRejected);
    expect(() => checkRelativePath(p, "files[0].path")).toThrow(/^files\[0\]\.path /);
  });
  it("repositories are owner/name without leading dots", () => {
    expect(checkRepository("acme/model-7b")).toEqual(["acme", "model-7b"]);
    for (const bad of ["acme", "a/b/c", ".partial/x", "acme/.hidden", "../x"]) expect(() => checkRepository(bad)).toThrow(PathRejected);
  });
  it("no two files share a path, without case, and no file is another's directory", () => {
    expect(() => checkDistinctPaths(["a", "b/c"])).not.toThrow();
    expect(() => checkDistinctPaths(["Model.bin", "model.BIN"])).toThrow("share a path");
    expect(() => checkDistinctPaths(["a", "a/b"])).toThrow("directory");
  });
});

describe("artifact sources configuration", () => {
  it.each([
    ["control-plane", [{ kind: "control-plane" }]],
    ["https://hf.internal/hf/, control-plane", [{ kind: "mirror", baseUrl: "https://hf.internal/hf" }, { kind: "control-plane" }]],
    ["http://127.0.0.1:9/m;token-file=/etc/mf/token", [{ kind: "mirror", baseUrl: "http://127.0.0.1:9/m", tokenFile: "/etc/mf/token" }]],
    ["", []],
  ])("parses %j", (text, want) => {
    expect(parseSourceList(text)).toEqual(want);
  });
  it.each([
    ["ftp://x/y", "only http and https"],
    ["https://user:pw@x/", "token file"],
    ["https://x/?a=1", "no query"],
    ["https://x/;token=abc", "unknown option"],
    ["https://x/;token-file=relative", "unknown option"],
    ["control-plane,control-plane", "twice"],
    ["mirror.example", "neither"],
  ])("refuses %j", (text, why) => {
    expect(() => parseSourceList(text)).toThrow(SourceConfigError);
    expect(() => parseSourceList(text)).toThrow(why);
  });
  it("builds Hugging Face URLs with every segment encoded", () => {
    expect(mirrorUrl("https://m/hf", "acme/model", "a".repeat(40), "dir/file name.json")).toBe(
      `https://m/hf/acme/model/resolve/${"a".repeat(40)}/dir/file%20name.json`,
    );
  });
  it("reads Content-Range", () => {
    expect(parseContentRange("bytes 100-199/200")).toEqual({ start: 100, total: 200 });
    expect(parseContentRange("bytes 100-199/*")).toEqual({ start: 100, total: undefined });
    expect(parseContentRange("items 1-2/3")).toBeUndefined();
    expect(parseContentRange(undefined)).toBeUndefined();
  });
  it("roots are canonical absolute paths", () => {
    expect(artifactRootsFrom("/a, /srv/models")).toEqual(["/a", "/srv/models"]);
    for (const bad of ["rel", "/a/../b", "/a/"]) expect(() => artifactRootsFrom(bad)).toThrow(SourceConfigError);
  });
});

describe("reserveFloor", () => {
  it.each([
    [undefined, 1000, 0],
    [{ minFreeBytes: 100n, minFreePercent: 0 }, 1000, 100],
    [{ minFreeBytes: 100n, minFreePercent: 20 }, 1000, 200],
    [{ minFreeBytes: 500n, minFreePercent: 20 }, 1000, 500],
    [{ minFreeBytes: 0n, minFreePercent: 1 }, 150, 2],
  ])("reserve case %# keeps the larger rule free", (reserve, total, floor) => {
    expect(reserveFloor(reserve, total)).toBe(floor);
  });
});

describe("validateJobResult for artifact.acquire.v1", () => {
  const commit = "c".repeat(40);
  const files = [
    { path: "a.bin", sizeBytes: 10n, sha256: "1".repeat(64) },
    { path: "b/c.json", sizeBytes: 5n, sha256: "2".repeat(64) },
  ];
  const spec = create(JobSpecSchema, {
    kind: { case: "artifactAcquire", value: { repository: "acme/m", commit, files, targetRoot: "/srv/models" } },
  });
  const good = { path: `/srv/models/acme/m/${commit}`, bytesWritten: 15n, files: [...files].reverse() };
  const check = (value: Partial<typeof good> & { bytesReused?: bigint }) => () =>
    validateJobResult(spec, create(JobResultSchema, { result: { case: "artifactAcquire", value: { ...good, ...value } } }));

  it("accepts the spec's inventory in any order", () => {
    expect(check({})).not.toThrow();
    expect(check({ bytesWritten: 5n, bytesReused: 10n })).not.toThrow();
  });
  it.each([
    ["another directory", { path: "/srv/models/acme/m/other" }, "result.artifact_acquire.path"],
    ["a missing file", { files: [files[0]!] }, "result.artifact_acquire.files"],
    ["an extra file", { files: [...files, { path: "x", sizeBytes: 1n, sha256: "3".repeat(64) }] }, "result.artifact_acquire.files"],
    ["a file twice", { files: [files[0]!, files[0]!] }, "reported twice"],
    ["a foreign file", { files: [files[0]!, { ...files[1]!, path: "evil" }] }, "not a file of the job"],
    ["another size", { files: [files[0]!, { ...files[1]!, sizeBytes: 6n }] }, "size_bytes"],
    ["another digest", { files: [files[0]!, { ...files[1]!, sha256: "f".repeat(64) }] }, "sha256"],
    ["more bytes than the files", { bytesWritten: 16n }, "bytes_written"],
  ])("refuses %s", (_what, value, field) => {
    expect(check(value)).toThrow(JobSpecError);
    expect(check(value)).toThrow(field);
  });
});

describe("checkCommitRoom", () => {
  const name = { repository: "acme/model", commit: "a".repeat(40) };
  it.each([0, 1, MAX_COMMIT_FILES - 1])("lets a new file join a commit of %d files", (held) => {
    expect(() => checkCommitRoom(name, held)).not.toThrow();
  });
  it.each([MAX_COMMIT_FILES, MAX_COMMIT_FILES + 5])("refuses a new file in a commit of %d files, naming the bound", (held) => {
    const err = (() => {
      try {
        checkCommitRoom(name, held);
      } catch (e) {
        return e;
      }
    })();
    expect(err).toBeInstanceOf(ConnectError);
    expect((err as ConnectError).code).toBe(Code.InvalidArgument);
    expect((err as ConnectError).rawMessage).toBe(
      `acme/model@${"a".repeat(40)} already holds ${held} files; a commit holds at most ${MAX_COMMIT_FILES}`,
    );
  });
});
