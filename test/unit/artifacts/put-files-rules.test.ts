// Table tests of PutArtifactFiles' pure rules: the server's check of a batch, and how the CLI
// splits a commit into calls.
import { describe, expect, it } from "vitest";
import { Code, ConnectError } from "@connectrpc/connect";
import { checkPutFiles, fileLabel, type PutFile } from "../../../server/artifacts/rules.js";
import { MAX_COMMIT_FILES, MAX_PUT_DATA_BYTES } from "../../../common/artifacts.js";
import { groupsOf, planSends } from "../../../cli/commands/artifacts-push-plan.js";

const digest = "a".repeat(64);
const file = (over: Partial<PutFile> = {}): PutFile => ({ path: "f.bin", sizeBytes: 3n, sha256: digest, data: new Uint8Array(3), ...over });
const batch = (files: PutFile[]) => ({ repository: "acme/model", commit: "0".repeat(40), files });

function refusal(run: () => void): { code: Code; message: string } | undefined {
  try {
    run();
    return undefined;
  } catch (err) {
    const e = ConnectError.from(err);
    return { code: e.code, message: e.rawMessage };
  }
}

describe("checkPutFiles", () => {
  it.each([
    ["one file sent whole", [file()]],
    ["a file asked about without data", [file({ data: new Uint8Array() })]],
    ["a large file asked about", [file({ sizeBytes: 2n ** 40n, data: new Uint8Array() })]],
    ["a whole commit's worth", Array.from({ length: MAX_COMMIT_FILES }, (_, i) => file({ path: `f${i}`, data: new Uint8Array() }))],
    ["exactly the data bound", [file({ sizeBytes: BigInt(MAX_PUT_DATA_BYTES), data: new Uint8Array(MAX_PUT_DATA_BYTES) })]],
  ])("accepts %s", (_, files) => {
    expect(refusal(() => checkPutFiles(batch(files)))).toBeUndefined();
  });

  const many = (n: number, size: number) =>
    Array.from({ length: n }, (_, i) => file({ path: `f${i}`, sizeBytes: BigInt(size), data: new Uint8Array(size) }));
  it.each([
    ["no files", [], /^files: is empty/],
    [
      "more files than a call holds",
      many(MAX_COMMIT_FILES + 1, 1),
      new RegExp(`^files: holds ${MAX_COMMIT_FILES + 1} files; at most ${MAX_COMMIT_FILES}`),
    ],
    ["more data than a call holds", many(2, MAX_PUT_DATA_BYTES / 2 + 1), new RegExp(`^files: carry ${MAX_PUT_DATA_BYTES + 2} bytes`)],
    ["a path out of the commit", [file(), file({ path: "../x" })], /^files\[1\] "\.\.\/x" path: /],
    ["an absolute path", [file({ path: "/etc/passwd" })], /^files\[0\] "\/etc\/passwd" path: /],
    ["a control character", [file({ path: "a\u0000b" })], /^files\[0\] "a\\u0000b" path: /],
    ["a repeated path", [file(), file()], /^files\[1\] "f\.bin": repeats a path/],
    ["a bad digest", [file({ sha256: "A".repeat(64) })], /^files\[0\] "f\.bin" sha256: must be lowercase/],
    ["an empty file", [file({ sizeBytes: 0n, data: new Uint8Array() })], /^files\[0\] "f\.bin" size_bytes: must be from 1/],
    ["a file sent in part", [file({ sizeBytes: 10n })], /^files\[0\] "f\.bin" data: is 3 bytes, not size_bytes 10; a file is sent whole/],
  ])("refuses %s with invalid_argument naming it", (_, files, message) => {
    const r = refusal(() => checkPutFiles(batch(files)));
    expect(r?.code).toBe(Code.InvalidArgument);
    expect(r?.message).toMatch(message);
  });

  it("refuses a bad commit name", () => {
    expect(refusal(() => checkPutFiles({ ...batch([file()]), commit: "main" }))?.message).toMatch(/^commit: /);
  });

  it("quotes at most a bounded part of a path", () => {
    expect(fileLabel(7, "x".repeat(5000))).toBe(`files[7] "${"x".repeat(120)}..."`);
  });
});

describe("groupsOf", () => {
  const sized = (...sizes: number[]) => sizes.map((size, i) => ({ size, i }));
  it.each([
    ["nothing", [], 3, 10, []],
    ["by count", [1, 1, 1, 1, 1], 2, 100, [[0, 1], [2, 3], [4]]],
    [
      "by bytes",
      [4, 4, 4, 1],
      10,
      8,
      [
        [0, 1],
        [2, 3],
      ],
    ],
    ["exactly at the byte bound", [5, 5], 10, 10, [[0, 1]]],
    ["an item over the byte bound alone", [2, 20, 2], 10, 10, [[0], [1], [2]]],
  ])("%s", (_, sizes, maxFiles, maxBytes, want) => {
    expect(groupsOf(sized(...(sizes as number[])), maxFiles as number, maxBytes as number).map((g) => g.map((x) => x.i))).toEqual(want);
  });
});

describe("planSends", () => {
  it("sends each content once, small ones batched and large ones streamed", () => {
    const f = (path: string, size: number, sha256: string) => ({ path, size, sha256 });
    const plan = planSends([f("a", 10, "x"), f("b", 500, "y"), f("c", 10, "x"), f("d", 100, "z"), f("e", 500, "y")], 100);
    expect(plan).toEqual({
      small: [f("a", 10, "x"), f("d", 100, "z")],
      large: [f("b", 500, "y")],
      repeats: [f("c", 10, "x"), f("e", 500, "y")],
    });
  });
});
