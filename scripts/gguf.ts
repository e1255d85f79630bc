// A tiny, real llama-architecture GGUF model for `npm run example:model`, the tests and the
// benchmarks: random weights from a seeded generator, so the file's bytes (and its SHA-256) are the
// same on every run, and llama.cpp loads it and generates tokens (noise text, real tokens, timings
// and memory) with no network.
// Layout per the GGUF v3 spec: header, metadata key/values, tensor infos, padding, aligned data.
import { createHash } from "node:crypto";
import { writeFile } from "node:fs/promises";
import { mulberry32 } from "../common/random.js";

export interface TinyModelOptions {
  /** Seeds the weights; a different seed is a different file. */
  seed?: number;
  contextLength?: number;
  /** The network's size; the default is the tiny one tests load in about a second. */
  shape?: ModelShape;
  /**
   * Byte-fallback tokens (default false). Without them every token is printable ASCII or the
   * newline, so random weights never write a byte sequence that is not UTF-8, which llama-server
   * refuses to answer with (a real model writes whole characters). With them, the vocabulary has
   * all 256 bytes, for tests of what a runtime does with such an answer.
   */
  byteFallback?: boolean;
}

export interface ModelShape {
  embedding: number;
  blocks: number;
  heads: number;
  feedForward: number;
}

/** About 26M parameters (99 MiB of f32): big enough that decoding is bound by memory, not by the HTTP around it. */
export const benchShape: ModelShape = { embedding: 512, blocks: 8, heads: 8, feedForward: 1408 };

export interface TinyModel {
  bytes: Buffer;
  sha256: string;
}

const alignment = 32;
const tinyShape: ModelShape = { embedding: 64, blocks: 2, heads: 4, feedForward: 128 };

// GGUF metadata value types (the subset this file uses).
enum ValueType {
  Uint32 = 4,
  Int32 = 5,
  Float32 = 6,
  Bool = 7,
  String = 8,
  Array = 9,
}
const f32Tensor = 0;

// llama.cpp token types.
enum TokenType {
  Normal = 1,
  Unknown = 2,
  Control = 3,
  Byte = 6,
}

type Value =
  | { type: ValueType.Uint32 | ValueType.Int32 | ValueType.Float32; value: number }
  | { type: ValueType.Bool; value: boolean }
  | { type: ValueType.String; value: string }
  | { type: ValueType.Array; of: ValueType.String; values: string[] }
  | { type: ValueType.Array; of: ValueType.Float32 | ValueType.Int32; values: number[] };

/** Builds the model file in memory. */
export function tinyLlamaGguf(options: TinyModelOptions = {}): TinyModel {
  const random = mulberry32(options.seed ?? 1);
  const { embedding, blocks, heads, feedForward } = options.shape ?? tinyShape;
  const vocab = vocabulary(options.byteFallback ?? false);
  const metadata: [string, Value][] = [
    ["general.architecture", { type: ValueType.String, value: "llama" }],
    ["general.name", { type: ValueType.String, value: "modelforge-tiny" }],
    ["general.alignment", { type: ValueType.Uint32, value: alignment }],
    ["llama.context_length", { type: ValueType.Uint32, value: options.contextLength ?? 1024 }],
    ["llama.embedding_length", { type: ValueType.Uint32, value: embedding }],
    ["llama.block_count", { type: ValueType.Uint32, value: blocks }],
    ["llama.feed_forward_length", { type: ValueType.Uint32, value: feedForward }],
    ["llama.attention.head_count", { type: ValueType.Uint32, value: heads }],
    ["llama.attention.head_count_kv", { type: ValueType.Uint32, value: heads }],
    ["llama.attention.layer_norm_rms_epsilon", { type: ValueType.Float32, value: 1e-5 }],
    ["llama.rope.dimension_count", { type: ValueType.Uint32, value: embedding / heads }],
    ["tokenizer.ggml.model", { type: ValueType.String, value: "llama" }],
    ["tokenizer.ggml.tokens", { type: ValueType.Array, of: ValueType.String, values: vocab.map((t) => t.text) }],
    ["tokenizer.ggml.scores", { type: ValueType.Array, of: ValueType.Float32, values: vocab.map((t) => t.score) }],
    ["tokenizer.ggml.token_type", { type: ValueType.Array, of: ValueType.Int32, values: vocab.map((t) => t.type) }],
    ["tokenizer.ggml.unknown_token_id", { type: ValueType.Uint32, value: 0 }],
    ["tokenizer.ggml.bos_token_id", { type: ValueType.Uint32, value: 1 }],
    ["tokenizer.ggml.eos_token_id", { type: ValueType.Uint32, value: 2 }],
    ["tokenizer.ggml.add_bos_token", { type: ValueType.Bool, value: true }],
  ];

  // Dimensions innermost first, as GGUF stores them: a [n_in, n_out] matrix maps n_in to n_out.
  const tensors: { name: string; dims: number[]; norm: boolean }[] = [
    { name: "token_embd.weight", dims: [embedding, vocab.length], norm: false },
    { name: "output_norm.weight", dims: [embedding], norm: true },
    { name: "output.weight", dims: [embedding, vocab.length], norm: false },
  ];
  for (let b = 0; b < blocks; b++) {
    const blk = (n: string, dims: number[], norm = false) => tensors.push({ name: `blk.${b}.${n}.weight`, dims, norm });
    blk("attn_norm", [embedding], true);
    blk("attn_q", [embedding, embedding]);
    blk("attn_k", [embedding, embedding]);
    blk("attn_v", [embedding, embedding]);
    blk("attn_output", [embedding, embedding]);
    blk("ffn_norm", [embedding], true);
    blk("ffn_gate", [embedding, feedForward]);
    blk("ffn_up", [embedding, feedForward]);
    blk("ffn_down", [feedForward, embedding]);
  }

  const out = new Writer();
  out.raw(Buffer.from("GGUF", "ascii"));
  out.u32(3);
  out.u64(tensors.length);
  out.u64(metadata.length);
  for (const [key, value] of metadata) {
    out.string(key);
    out.value(value);
  }
  let offset = 0;
  const data: Buffer[] = [];
  for (const t of tensors) {
    out.string(t.name);
    out.u32(t.dims.length);
    for (const d of t.dims) out.u64(d);
    out.u32(f32Tensor);
    out.u64(offset);
    const count = t.dims.reduce((a, b) => a * b, 1);
    const weights = Buffer.alloc(count * 4);
    // Norms at 1 keep activations sane; other weights small and centred so outputs vary by token.
    for (let i = 0; i < count; i++) weights.writeFloatLE(t.norm ? 1 : (random() - 0.5) * 0.2, i * 4);
    const padded = pad(weights);
    data.push(padded);
    offset += padded.length;
  }
  const header = pad(out.buffer());
  const bytes = Buffer.concat([header, ...data]);
  return { bytes, sha256: createHash("sha256").update(bytes).digest("hex") };
}

/** Writes the model to `path` and returns its digest and size. */
export async function writeTinyLlamaGguf(path: string, options?: TinyModelOptions): Promise<{ sha256: string; size: number }> {
  const model = tinyLlamaGguf(options);
  await writeFile(path, model.bytes);
  return { sha256: model.sha256, size: model.bytes.length };
}

/** <unk>, <s>, </s>, the 256 byte fallbacks (unless left out), then printable ASCII (space as SentencePiece's ▁). */
function vocabulary(byteFallback: boolean): { text: string; score: number; type: TokenType }[] {
  const tokens = [
    { text: "<unk>", score: 0, type: TokenType.Unknown },
    { text: "<s>", score: 0, type: TokenType.Control },
    { text: "</s>", score: 0, type: TokenType.Control },
  ];
  // Without byte fallback, the newline's byte token alone (llama.cpp's SPM vocabulary needs one).
  for (let b = 0; b < 256; b++)
    if (byteFallback || b === 0x0a)
      tokens.push({ text: `<0x${b.toString(16).toUpperCase().padStart(2, "0")}>`, score: 0, type: TokenType.Byte });
  tokens.push({ text: "\u2581", score: -1, type: TokenType.Normal });
  for (let c = 0x21; c <= 0x7e; c++) tokens.push({ text: String.fromCharCode(c), score: -1, type: TokenType.Normal });
  return tokens;
}

function pad(b: Buffer): Buffer {
  const rest = b.length % alignment;
  return rest === 0 ? b : Buffer.concat([b, Buffer.alloc(alignment - rest)]);
}

class Writer {
  private readonly parts: Buffer[] = [];

  raw(b: Buffer): void {
    this.parts.push(b);
  }

  u32(n: number): void {
    const b = Buffer.alloc(4);
    b.writeUInt32LE(n);
    this.parts.push(b);
  }

  u64(n: number): void {
    const b = Buffer.alloc(8);
    b.writeBigUInt64LE(BigInt(n));
    this.parts.push(b);
  }

  string(s: string): void {
    const bytes = Buffer.from(s, "utf8");
    this.u64(bytes.length);
    this.parts.push(bytes);
  }

  value(v: Value): void {
    this.u32(v.type);
    switch (v.type) {
      case ValueType.Uint32:
        this.u32(v.value);
        break;
      case ValueType.Int32:
      case ValueType.Float32:
        this.scalar(v.type, v.value);
        break;
      case ValueType.Bool:
        this.raw(Buffer.from([v.value ? 1 : 0]));
        break;
      case ValueType.String:
        this.string(v.value);
        break;
      case ValueType.Array:
        this.u32(v.of);
        this.u64(v.values.length);
        if (v.of === ValueType.String) for (const s of v.values) this.string(s);
        else for (const n of v.values) this.scalar(v.of, n);
    }
  }

  private scalar(type: ValueType.Int32 | ValueType.Float32, n: number): void {
    const b = Buffer.alloc(4);
    if (type === ValueType.Int32) b.writeInt32LE(n);
    else b.writeFloatLE(n);
    this.parts.push(b);
  }

  buffer(): Buffer {
    return Buffer.concat(this.parts);
  }
}
