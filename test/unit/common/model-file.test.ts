import { describe, expect, it } from "vitest";
import { chooseModelFile } from "../../../common/model-file.js";

const hf = ["README.md", "config.json", "tiny.Q4_K_M.gguf", "tiny.Q8_0.gguf"];

describe("chooseModelFile", () => {
  it.each([
    ["the named file", hf, "tiny.Q8_0.gguf", "tiny.Q8_0.gguf"],
    ["a named non-GGUF file", hf, "config.json", "config.json"],
    ["the single .gguf among other files", ["README.md", "config.json", "m.gguf"], "", "m.gguf"],
    ["a .GGUF in capitals", ["README.md", "M.GGUF"], "", "M.GGUF"],
    ["the single .gguf in a folder", ["a/README.md", "a/b/m.gguf"], "", "a/b/m.gguf"],
    ["the only file, whatever its name", ["model.safetensors"], "", "model.safetensors"],
    ["an absolute path, as in a lease", ["/r/acme/c/README.md", "/r/acme/c/m.gguf"], "", "/r/acme/c/m.gguf"],
  ])("loads %s", (_, paths, named, expected) => {
    expect(chooseModelFile(paths, named)).toEqual({ ok: true, path: expected });
  });

  it.each([
    ["several GGUFs and none named", hf, "", 'the commit holds 2 .gguf files ("tiny.Q4_K_M.gguf", "tiny.Q8_0.gguf"); name the one to load'],
    [
      "a named file not in the commit",
      hf,
      "tiny.Q2_K.gguf",
      '"tiny.Q2_K.gguf" is not a file of the commit, which holds "README.md", "config.json", "tiny.Q4_K_M.gguf", "tiny.Q8_0.gguf"',
    ],
    ["a name that differs only in case", hf, "TINY.Q8_0.GGUF", '"TINY.Q8_0.GGUF" is not a file of the commit'],
    ["several files and no GGUF", ["a.bin", "b.bin"], "", 'no .gguf file among its 2 files ("a.bin", "b.bin")'],
    ["an empty commit", [], "", "the commit holds no files"],
  ])("refuses %s", (_, paths, named, problem) => {
    const choice = chooseModelFile(paths, named);
    expect(choice.ok).toBe(false);
    if (!choice.ok) expect(choice.problem).toContain(problem);
  });

  it("lists the first five of many files and a count", () => {
    const many = Array.from({ length: 40 }, (_, i) => `m.${String(i).padStart(2, "0")}.gguf`);
    const choice = chooseModelFile(many, "");
    expect(choice).toEqual({
      ok: false,
      problem:
        'the commit holds 40 .gguf files ("m.00.gguf", "m.01.gguf", "m.02.gguf", "m.03.gguf", "m.04.gguf" and 35 more); name the one to load',
    });
  });
});
