// The engine layer's pure rules, table-tested: the openai-http argv template, /proc parsing, the
// GGUF header check, engine parameters, and the tiny model fixture's stable bytes.
import { describe, expect, it } from "vitest";
import { buildArgv, parseTemplateConfig, validateTemplate, type OpenAiHttpTemplate } from "../../agent/engines/openai-http.js";
import { gpuEnv, hasLlamaCudaBuild, unavailableGpus } from "../../agent/engines/gpus.js";
import { knownEnginesAndBackends } from "../../common/engines.js";
import { parseStat, parseStatusMemory } from "../../agent/engines/proc.js";
import { ggufHeaderProblem, ggufTruncation } from "../../agent/engines/llama-cpp/gguf-header.js";
import { EngineError, validateParams } from "../../agent/engines/supervisor.js";
import { tinyLlamaGguf } from "../../scripts/gguf.js";

describe("openai-http template", () => {
  const template: OpenAiHttpTemplate = {
    command: ["/usr/bin/server", "--model", "{model}", "--listen={host}:{port}", "--ctx", "{context_size}"],
  };
  const values = { model: "/models/a b; rm -rf /", port: 8123, host: "127.0.0.1", contextSize: 2048 };

  it("substitutes inside argv elements: a value never becomes another argument", () => {
    expect(buildArgv(template, values)).toEqual([
      "/usr/bin/server",
      "--model",
      "/models/a b; rm -rf /",
      "--listen=127.0.0.1:8123",
      "--ctx",
      "2048",
    ]);
  });

  it("substitutes the assigned GPUs: {gpus} as comma-separated indices, {gpu_count}, each inside its own element", () => {
    const vllm = {
      command: ["/usr/bin/vllm", "serve", "{model}", "--port={port}", "--devices={gpus}", "--tensor-parallel-size", "{gpu_count}"],
    };
    expect(buildArgv(vllm, { ...values, gpus: [2, 5] })).toEqual([
      "/usr/bin/vllm",
      "serve",
      "/models/a b; rm -rf /",
      "--port=8123",
      "--devices=2,5",
      "--tensor-parallel-size",
      "2",
    ]);
    expect(() => buildArgv(vllm, values)).toThrow("no value for {gpus}: the runtime profile assigns no GPUs (gpu_count)");
    expect(() => validateTemplate(vllm)).not.toThrow();
  });

  it.each([
    [{ ...values, contextSize: undefined }, "no value for {context_size}"],
    [{ ...values, model: "relative/model" }, "the model path must be absolute"],
  ])("refuses %j", (v, message) => {
    expect(() => buildArgv(template, v)).toThrow(message);
  });

  it.each([
    [{ command: ["/usr/bin/s", "{model}", "{port}"] }, undefined],
    [{ command: ["/usr/bin/s", "-m", "{model}", "{port}"], healthPath: "/v1/health" }, undefined],
    [{ command: ["/usr/bin/s", "{port}"] }, "must take the model path"],
    [{ command: ["/bin/sh", "-c", "serve {model} {port}"] }, "cannot be a shell"],
    [{ command: ["/usr/bin/env", "serve", "{model}", "{port}"] }, "cannot be a shell"],
    [{ command: ["/usr/bin/../bin/s", "{model}", "{port}"] }, "normalised"],
    [{ command: ["/usr/bin/s", "{Model}", "{model}", "{port}"] }, "stray brace"],
    [{ command: ["/usr/bin/s", "{model", "{model}", "{port}"] }, "stray brace"],
    [{ command: ["/usr/bin/s", "{model}\n", "{port}"] }, "control characters"],
    [{ command: ["/usr/bin/s", "{model}", "{port}"], env: { "LD_PRELOAD=x": "y" } }, "plain variable name"],
    [{ command: [] }, "absolute path"],
    [{ command: ["server", "{port}"] }, "absolute path"],
    [{ command: ["/usr/bin/{model}", "{port}"] }, "cannot contain placeholders"],
    [{ command: ["/usr/bin/s", "{model}"] }, "must take the port"],
    [{ command: ["/usr/bin/s", "{port}", "{shell}"] }, "unknown placeholder {shell}"],
    [{ command: ["/usr/bin/s", "{port}", "{constructor}"] }, "unknown placeholder {constructor}"],
    [{ command: ["/usr/bin/s", "{model}", "{port}"], healthPath: "http://elsewhere/" }, "healthPath"],
  ])("validates %j", (t, problem) => {
    if (problem === undefined) expect(() => validateTemplate(t)).not.toThrow();
    else expect(() => validateTemplate(t)).toThrow(problem);
  });
});

describe("advertised engines", () => {
  it("keeps the engines and backends this side knows, and drops the rest", () => {
    expect(knownEnginesAndBackends(["openai-http", "llama.cpp+cuda", "llama.cpp", "llama.cpp+rocm", "vllm"])).toEqual([
      "llama.cpp",
      "openai-http",
      "llama.cpp+cuda",
    ]);
  });
});

describe("GPUs of a lease", () => {
  const have = [
    { uuid: "GPU-a", index: 0 },
    { uuid: "GPU-b", index: 1 },
  ];
  it.each([
    [[], undefined],
    [[{ uuid: "GPU-b", index: 1 }], undefined],
    [have, undefined],
    [[{ uuid: "GPU-z", index: 0 }], "GPU GPU-z (index 0) is not on this node"],
    [[{ uuid: "GPU-b", index: 0 }], "GPU GPU-b is at index 1 here, not 0"],
    [[have[0]!, have[0]!], "the lease names a GPU twice"],
  ])("%j: %s", (assigned, problem) => {
    expect(unavailableGpus(assigned, have)).toBe(problem);
  });

  it("this CPU install carries no CUDA build: the packages are the empty stand-in", async () => {
    expect(await hasLlamaCudaBuild()).toBe(false);
  });

  it("confines a runtime to its GPUs in nvidia-smi's order; none assigned leaves the environment alone", () => {
    expect(
      gpuEnv([
        { uuid: "GPU-b", index: 1 },
        { uuid: "GPU-d", index: 3 },
      ]),
    ).toEqual({ CUDA_DEVICE_ORDER: "PCI_BUS_ID", CUDA_VISIBLE_DEVICES: "1,3" });
    expect(gpuEnv([])).toEqual({});
  });
});

describe("openai-http template file", () => {
  const good = { command: ["/usr/bin/s", "--model", "{model}", "--port", "{port}"], healthPath: "/health", env: { HF_HOME: "/x" } };
  it("reads command, healthPath and env", () => {
    expect(parseTemplateConfig(JSON.stringify(good))).toEqual(good);
  });
  it.each([
    ["not json", "not valid JSON"],
    ["[]", "expected a JSON object"],
    [JSON.stringify({ ...good, shell: true }), 'unknown key "shell"'],
    [JSON.stringify({ command: "/usr/bin/s {model} {port}" }), "array of strings"],
    [JSON.stringify({ command: ["/usr/bin/s", 1] }), "array of strings"],
    [JSON.stringify({ ...good, healthPath: 3 }), "healthPath must be a string"],
    [JSON.stringify({ ...good, env: ["A=1"] }), "env must be an object"],
    [JSON.stringify({ ...good, env: { A: 1 } }), "the value must be a string"],
    [JSON.stringify({ command: ["/bin/bash", "-c", "{model} {port}"] }), "cannot be a shell"],
  ])("refuses %s", (text, problem) => {
    expect(() => parseTemplateConfig(text)).toThrow(problem);
  });
});

describe("/proc parsing", () => {
  it("reads VmRSS and VmHWM in bytes", () => {
    const status = "Name:\tnode\nVmPeak:\t  999 kB\nVmHWM:\t  2048 kB\nVmRSS:\t  1024 kB\nThreads:\t4\n";
    expect(parseStatusMemory(status)).toEqual({ rssBytes: 1024 * 1024, peakRssBytes: 2048 * 1024 });
    expect(parseStatusMemory("Name:\tkthreadd\n")).toBeUndefined();
  });

  it("reads state and start time even when the name has spaces and parentheses", () => {
    const rest = Array.from({ length: 50 }, (_, i) => String(i + 4)).join(" ");
    // Each value is its field number: 3 is the state, 5 the process group, 22 the start time.
    expect(parseStat(`42 (we (ird) name) S ${rest}`)).toEqual({ state: "S", startTicks: 22, pgrp: 5 });
    expect(parseStat("")).toBeUndefined();
    expect(parseStat("42 (x) S 1 2")).toBeUndefined();
  });
});

describe("GGUF header check", () => {
  const header = (magic: string, version: number, tensors: bigint, kvs: bigint) => {
    const b = Buffer.alloc(24);
    b.write(magic, 0, "latin1");
    b.writeUInt32LE(version, 4);
    b.writeBigUInt64LE(tensors, 8);
    b.writeBigUInt64LE(kvs, 16);
    return b;
  };
  it.each([
    ["valid v3", header("GGUF", 3, 2n, 3n), 1000, undefined],
    ["valid v2", header("GGUF", 2, 0n, 0n), 24, undefined],
    ["short", Buffer.from("GGUF"), 4, "too short"],
    ["bad magic", header("GGML", 3, 0n, 0n), 1000, "bad magic"],
    ["version 1", header("GGUF", 1, 0n, 0n), 1000, "version 1"],
    ["absurd tensor count", header("GGUF", 3, 1n << 60n, 0n), 1 << 20, "cannot fit"],
    ["absurd metadata count", header("GGUF", 3, 0n, 0xffffffffffffffffn), 1 << 20, "cannot fit"],
  ])("%s", (_, bytes, size, problem) => {
    const got = ggufHeaderProblem(bytes, size);
    if (problem === undefined) expect(got).toBeUndefined();
    else expect(got).toContain(problem);
  });

  it("accepts the tiny model", () => {
    const { bytes } = tinyLlamaGguf();
    expect(ggufHeaderProblem(bytes.subarray(0, 24), bytes.length)).toBeUndefined();
  });
});

describe("GGUF truncation", () => {
  // Data from byte 1,024: an f32 tensor of 4 × 8 (128 bytes) at 0, a Q8_0 one of 64 (2 blocks of 34) at 128.
  const parsed = (types: number[]) => ({
    tensorDataOffset: 1024n,
    tensorInfos: [
      { name: "a", n_dims: 2, shape: [4n, 8n], dtype: types[0]!, offset: 0n },
      { name: "b", n_dims: 1, shape: [64n], dtype: types[1]!, offset: 128n },
    ],
  });
  it.each([
    ["whole", [0, 8], 1024 + 128 + 68, undefined],
    ["longer than its tensors", [0, 8], 4096, undefined],
    ["one byte short", [0, 8], 1024 + 128 + 67, "its tensors end at byte 1220, and it has 1219"],
    ["cut inside the first tensor", [0, 8], 1100, "truncated"],
    ["the last tensor of a type not known: judged by the others", [0, 9999], 1024 + 128, undefined],
    ["no tensors of a known type", [9999, 9999], 0, undefined],
  ])("%s", (_, types, size, problem) => {
    const got = ggufTruncation(parsed(types as number[]) as Parameters<typeof ggufTruncation>[0], size as number);
    if (problem === undefined) expect(got).toBeUndefined();
    else expect(got).toContain(problem);
  });
});

describe("engine parameters", () => {
  it.each([
    [{}, true],
    [{ contextSize: 1024, threads: 1 }, true],
    [{ contextSize: 15 }, false],
    [{ contextSize: 2 ** 21 }, false],
    [{ threads: 0 }, false],
    [{ threads: 2.5 }, false],
    [{ threads: Number.NaN }, false],
    [{ gpuLayers: "all" as const }, true],
    [{ gpuLayers: 1024 }, true],
    [{ gpuLayers: 0 }, false],
    [{ gpuLayers: 1025 }, false],
  ])("%j valid: %s", (params, ok) => {
    if (ok) expect(validateParams(params)).toEqual(params);
    else expect(() => validateParams(params)).toThrow(EngineError);
  });
});

describe("tiny GGUF fixture", () => {
  it("is byte-for-byte stable for a seed, so its digest can be pinned", () => {
    const a = tinyLlamaGguf();
    expect(a.sha256).toBe("c34ed2c93d7cdb0175edbb023ddb92382ce751700516e03add193593410b6042");
    expect(a.bytes.length).toBe(383_424);
    expect(tinyLlamaGguf({ seed: 1 }).bytes.equals(a.bytes)).toBe(true);
    expect(tinyLlamaGguf({ seed: 2 }).sha256).not.toBe(a.sha256);
  });

  it("is GGUF v3 with 21 tensors", () => {
    const { bytes } = tinyLlamaGguf();
    expect(bytes.toString("latin1", 0, 4)).toBe("GGUF");
    expect(bytes.readUInt32LE(4)).toBe(3);
    expect(bytes.readBigUInt64LE(8)).toBe(3n + 2n * 9n);
    expect(bytes.length % 32).toBe(0);
  });
});
