// The GGUF memory estimate as tables over headers of known shape, and read from real files.
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { estimateFile } from "../../../server/artifacts/gguf-header.js";
import {
  commitEstimate,
  DEFAULT_PARALLEL_MAX,
  EstimateError,
  estimateGguf,
  MARGIN_FIXED_BYTES,
  memoryNeed,
  replicaParallel,
  type GgufShape,
} from "../../../server/artifacts/memory.js";
import { tinyLlamaGguf } from "../../../scripts/gguf.js";

const F32 = 0;
const F16 = 1;
const Q4_0 = 2;
const Q4_K = 12;
const t = (dtype: number, ...shape: number[]) => ({ dtype, shape: shape.map(BigInt) });
const llama = (metadata: { [key: string]: unknown }, tensors = [t(F32, 64)]): GgufShape => ({
  architecture: "llama",
  metadata: {
    "llama.block_count": 2,
    "llama.embedding_length": 64,
    "llama.attention.head_count": 4,
    "llama.context_length": 1024,
    ...metadata,
  },
  tensors,
});

describe("estimateGguf", () => {
  it.each<[string, GgufShape, { weightsBytes: number; kvBytesPerToken: number; contextLength: number }]>([
    // 2 layers x 4 KV heads x (16 + 16) head dims x 2 bytes.
    ["multi-head attention", llama({}), { weightsBytes: 256, kvBytesPerToken: 512, contextLength: 1024 }],
    [
      "grouped-query attention: KV heads only",
      llama({ "llama.attention.head_count_kv": 1 }),
      { weightsBytes: 256, kvBytesPerToken: 128, contextLength: 1024 },
    ],
    [
      "32 layers, 8 of 32 KV heads, 4096 wide (a Llama 3 8B shape)",
      llama({
        "llama.block_count": 32,
        "llama.embedding_length": 4096,
        "llama.attention.head_count": 32,
        "llama.attention.head_count_kv": 8,
        "llama.context_length": 8192,
      }),
      { weightsBytes: 256, kvBytesPerToken: 131_072, contextLength: 8192 },
    ],
    [
      "explicit key and value lengths",
      llama({ "llama.attention.key_length": 32, "llama.attention.value_length": 8 }),
      { weightsBytes: 256, kvBytesPerToken: 640, contextLength: 1024 },
    ],
    [
      "KV heads per layer, one layer without attention",
      llama({ "llama.attention.head_count": [4, 0], "llama.attention.head_count_kv": [2, 0] }),
      { weightsBytes: 256, kvBytesPerToken: 128, contextLength: 1024 },
    ],
    [
      "uint64 counts",
      llama({ "llama.block_count": 2n, "llama.context_length": 4096n }),
      { weightsBytes: 256, kvBytesPerToken: 512, contextLength: 4096 },
    ],
    [
      "tensor bytes by type: f16, q4_0 blocks of 32, q4_K blocks of 256",
      llama({}, [t(F16, 64, 2), t(Q4_0, 64, 2), t(Q4_K, 256, 4)]),
      { weightsBytes: 256 + 4 * 18 + 4 * 144, kvBytesPerToken: 512, contextLength: 1024 },
    ],
    [
      "a later shard of a split model: tensors only",
      { architecture: undefined, metadata: {}, tensors: [t(F32, 10)] },
      { weightsBytes: 40, kvBytesPerToken: 0, contextLength: 0 },
    ],
  ])("%s", (_, shape, expected) => {
    expect(estimateGguf(shape)).toEqual(expected);
  });

  it.each<[string, GgufShape, string]>([
    ["an unknown tensor type", llama({}, [t(99, 4)]), "tensor type 99"],
    ["no layer count", llama({ "llama.block_count": undefined }), "llama.block_count"],
    ["a per-layer count of the wrong length", llama({ "llama.attention.head_count_kv": [1, 1, 1] }), "head_count_kv"],
    ["a negative count", llama({ "llama.embedding_length": -1 }), "llama.embedding_length"],
  ])("refuses %s", (_, shape, text) => {
    expect(() => estimateGguf(shape)).toThrow(EstimateError);
    expect(() => estimateGguf(shape)).toThrow(text);
  });
});

describe("memoryNeed", () => {
  const e = { weightsBytes: 1000, kvBytesPerToken: 10, contextLength: 100 };
  it.each([
    ["the profile's context size", 50, Math.ceil(1500 * 1.1) + MARGIN_FIXED_BYTES],
    ["0: the model's own context length", 0, Math.ceil(2000 * 1.1) + MARGIN_FIXED_BYTES],
  ])("at %s", (_, context, need) => expect(memoryNeed(e, context)).toBe(need));
  it("counts the KV cache of every parallel sequence", () => {
    expect(memoryNeed(e, 50, 4)).toBe(Math.ceil((1000 + 4 * 500) * 1.1) + MARGIN_FIXED_BYTES);
  });
});

describe("replicaParallel", () => {
  // 1000 bytes of weights; 10 bytes of KV cache per token.
  const e = { weightsBytes: 1000, kvBytesPerToken: 10, contextLength: 100 };
  it.each<[string, number, typeof e | undefined, number, number]>([
    ["the profile's own number wins", 3, e, 50, 3],
    ["the profile's own number past the default's cap", 32, e, 50, 32],
    ["caches within the weights: 1000 / (10 × 50)", 0, e, 50, 2],
    ["the model's own context: 1000 / (10 × 100)", 0, e, 0, 1],
    ["a cache larger than the weights still gets one", 0, e, 1000, 1],
    ["a small context is capped at 8", 0, e, 1, DEFAULT_PARALLEL_MAX],
    ["no KV cache at all (no attention layers): the cap", 0, { ...e, kvBytesPerToken: 0 }, 50, DEFAULT_PARALLEL_MAX],
    ["no estimate: one", 0, undefined, 50, 1],
  ])("%s", (_, profile, estimate, context, want) => expect(replicaParallel(profile, estimate, context)).toBe(want));
});

describe("estimateFile", () => {
  const dir = mkdtempSync(join(tmpdir(), "mf-gguf-"));
  afterAll(() => rmSync(dir, { recursive: true, force: true }));
  const file = (name: string, bytes: Uint8Array) => {
    writeFileSync(join(dir, name), bytes);
    return join(dir, name);
  };

  it("reads the tiny llama model's header: f32 tensors, 2 layers of 4 heads 16 wide", async () => {
    const vocab = 99;
    const perBlock = 64 + 4 * 64 * 64 + 64 + 3 * 64 * 128;
    const weights = (2 * 64 * vocab + 64 + 2 * perBlock) * 4;
    expect(await estimateFile(file("tiny.gguf", tinyLlamaGguf().bytes))).toEqual({
      weightsBytes: weights,
      kvBytesPerToken: 512,
      contextLength: 1024,
    });
  });

  it.each([
    ["not a GGUF", Buffer.from("just some text, not a model")],
    ["a GGUF cut inside its header", tinyLlamaGguf().bytes.subarray(0, 200)],
    ["an empty file", Buffer.alloc(0)],
  ])("gives no estimate for %s", async (_, bytes) => {
    expect(await estimateFile(file("x.gguf", bytes))).toBeUndefined();
  });
});

describe("commitEstimate", () => {
  const e = (weightsBytes: number, kvBytesPerToken = 0, contextLength = 0) => ({ weightsBytes, kvBytesPerToken, contextLength });
  it.each([
    ["one model", [{ path: "m.gguf", estimate: e(100, 8, 512) }], e(100, 8, 512)],
    [
      "a split model: shards' weights add up, the KV comes from the first",
      [
        { path: "m-00001-of-00002.gguf", estimate: e(100, 8, 512) },
        { path: "m-00002-of-00002.GGUF", estimate: e(50) },
        { path: "README.md", estimate: undefined },
      ],
      e(150, 8, 512),
    ],
    ["no GGUF", [{ path: "weights.bin", estimate: undefined }], undefined],
    [
      "a GGUF without an estimate",
      [
        { path: "a.gguf", estimate: e(1) },
        { path: "b.gguf", estimate: undefined },
      ],
      undefined,
    ],
  ])("%s", (_, files, expected) => expect(commitEstimate(files)).toEqual(expected));

  const quants = [
    { path: "m.Q4_K_M.gguf", estimate: e(100, 8, 512) },
    { path: "m.Q8_0.gguf", estimate: e(200, 8, 512) },
    { path: "big-00001-of-00002.gguf", estimate: e(300, 16, 512) },
    { path: "big-00002-of-00002.gguf", estimate: e(300) },
    { path: "README.md", estimate: undefined },
  ];
  it.each([
    ["the named quantisation only", "m.Q8_0.gguf", e(200, 8, 512)],
    ["every part of a named split model", "big-00001-of-00002.gguf", e(600, 16, 512)],
    ["a named file that is no GGUF", "README.md", undefined],
  ])("with a model file: %s", (_, modelFile, expected) => expect(commitEstimate(quants, modelFile)).toEqual(expected));
});
