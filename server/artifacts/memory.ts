// What a GGUF model needs in RAM, from its header alone: the tensors' bytes by their ggml type, and
// the KV cache per token of context from the layer, head and embedding counts. Pure; the header is
// read by gguf-header.ts at push time and the two numbers are stored with the artifact, so
// placement can price any profile's context size without reading the file again.

import { ggmlTensorBytes } from "../../common/gguf-tensors.js";

export interface GgufShape {
  /** general.architecture; absent in the later shards of a split model (their KV is then 0). */
  architecture: string | undefined;
  /** The metadata of the header: `${architecture}.block_count` and the like. */
  metadata: { [key: string]: unknown };
  tensors: { dtype: number; shape: bigint[] }[];
}

/** Files whose header is read at push; anything else has no estimate. */
export const isGguf = (path: string) => path.toLowerCase().endsWith(".gguf");

export interface MemoryEstimate {
  weightsBytes: number;
  /** KV cache bytes per token of context (f16 keys and values, llama.cpp's default). */
  kvBytesPerToken: number;
  /** The context length the model was trained with; a profile's context size 0 means this. */
  contextLength: number;
}

/** Bytes of f16, the KV cache's element type unless a profile says otherwise (none does yet). */
const KV_ELEMENT_BYTES = 2;

/**
 * The stated margin on top of weights and KV cache: llama.cpp's compute buffers, the runtime
 * process and allocator slack. A tenth of the need plus 256 MiB covers small and large models.
 */
export const MARGIN_FIXED_BYTES = 256 * 2 ** 20;
export const MARGIN_FRACTION = 0.1;

export class EstimateError extends Error {}

function tensorBytes(t: { dtype: number; shape: bigint[] }): number {
  const bytes = ggmlTensorBytes(t);
  if (bytes === undefined) throw new EstimateError(`tensor type ${t.dtype} is not one the estimate knows`);
  return bytes;
}

/** A count in the metadata: a number, or one per layer (models whose layers differ). */
function perLayer(raw: unknown, layers: number, what: string): number[] {
  const value = typeof raw === "bigint" ? Number(raw) : raw;
  if (typeof value === "number" && Number.isInteger(value) && value >= 0) return Array<number>(layers).fill(value);
  if (Array.isArray(value) && value.length === layers && value.every((v) => typeof v === "number" && Number.isInteger(v) && v >= 0)) {
    return value as number[];
  }
  throw new EstimateError(`${what} is missing or not a count`);
}

function count(metadata: { [key: string]: unknown }, key: string): number {
  const v = metadata[key];
  const n = typeof v === "bigint" ? Number(v) : v;
  if (typeof n !== "number" || !Number.isInteger(n) || n < 0) throw new EstimateError(`${key} is missing or not a count`);
  return n;
}

function kvOf(shape: GgufShape): { kvBytesPerToken: number; contextLength: number } {
  const arch = shape.architecture;
  if (arch === undefined) return { kvBytesPerToken: 0, contextLength: 0 };
  const m = shape.metadata;
  const layers = count(m, `${arch}.block_count`);
  const embedding = count(m, `${arch}.embedding_length`);
  const heads = perLayer(m[`${arch}.attention.head_count`], layers, `${arch}.attention.head_count`);
  const kvHeads =
    m[`${arch}.attention.head_count_kv`] === undefined
      ? heads
      : perLayer(m[`${arch}.attention.head_count_kv`], layers, `${arch}.attention.head_count_kv`);
  let elements = 0;
  for (let layer = 0; layer < layers; layer++) {
    const h = heads[layer]!;
    if (h === 0) continue; // a layer without attention (some hybrid models) keeps no cache
    const key = m[`${arch}.attention.key_length`] === undefined ? embedding / h : count(m, `${arch}.attention.key_length`);
    const value = m[`${arch}.attention.value_length`] === undefined ? embedding / h : count(m, `${arch}.attention.value_length`);
    elements += kvHeads[layer]! * (key + value);
  }
  return { kvBytesPerToken: Math.ceil(elements * KV_ELEMENT_BYTES), contextLength: count(m, `${arch}.context_length`) };
}

/** The estimate of one GGUF file; throws EstimateError when the header does not say enough. */
export function estimateGguf(shape: GgufShape): MemoryEstimate {
  const weightsBytes = shape.tensors.reduce((sum, t) => sum + tensorBytes(t), 0);
  if (!Number.isSafeInteger(weightsBytes)) throw new EstimateError("the tensors' sizes overflow");
  return { weightsBytes, ...kvOf(shape) };
}

/**
 * What a replica needs in RAM at a context size (0: the model's own) for each of its `parallel`
 * sequences (each holds a KV cache of the whole context), with the margin.
 */
export function memoryNeed(estimate: MemoryEstimate, contextSize: number, parallel = 1): number {
  const context = contextSize === 0 ? estimate.contextLength : contextSize;
  const need = estimate.weightsBytes + estimate.kvBytesPerToken * context * parallel;
  return Math.ceil(need * (1 + MARGIN_FRACTION)) + MARGIN_FIXED_BYTES;
}

/** The most sequences the default gives a llama.cpp replica. */
export const DEFAULT_PARALLEL_MAX = 8;

/**
 * How many requests a llama.cpp replica generates at once when its profile leaves it to the model
 * (parallel 0): as many sequences as keep their KV caches together within the size of the
 * weights, from 1 to DEFAULT_PARALLEL_MAX. Batching pays while the step is bound by reading the
 * weights; past that the caches cost as much memory as the model again for little more speed.
 * Without an estimate: 1. Pure.
 */
export function replicaParallel(profileParallel: number, estimate: MemoryEstimate | undefined, contextSize: number): number {
  if (profileParallel > 0) return profileParallel;
  if (estimate === undefined) return 1;
  const perSequence = estimate.kvBytesPerToken * (contextSize === 0 ? estimate.contextLength : contextSize);
  if (perSequence <= 0) return DEFAULT_PARALLEL_MAX;
  return Math.min(DEFAULT_PARALLEL_MAX, Math.max(1, Math.floor(estimate.weightsBytes / perSequence)));
}

/** The estimate stored with an artifact row, if it has one. */
export function storedEstimate(row: {
  estimatedWeightsBytes: bigint | null;
  estimatedKvBytesPerToken: bigint | null;
  estimatedContextLength: number | null;
}): MemoryEstimate | undefined {
  if (row.estimatedWeightsBytes === null || row.estimatedKvBytesPerToken === null || row.estimatedContextLength === null) return undefined;
  return {
    weightsBytes: Number(row.estimatedWeightsBytes),
    kvBytesPerToken: Number(row.estimatedKvBytesPerToken),
    contextLength: row.estimatedContextLength,
  };
}

/**
 * A commit's estimate from its GGUF files: the weights of a split model's shards add up, and the
 * KV cache and context length come from the header that has them. Undefined when the commit has no
 * GGUF, or one without an estimate: an unknown need, which fits nowhere.
 */
export function commitEstimate(
  files: { path: string; estimate: MemoryEstimate | undefined }[],
  modelFile = "",
): MemoryEstimate | undefined {
  const ggufs = files.filter((f) => isGguf(f.path) && loadedWith(f.path, modelFile));
  if (ggufs.length === 0 || ggufs.some((f) => f.estimate === undefined)) return undefined;
  const estimates = ggufs.map((f) => f.estimate!);
  return {
    weightsBytes: estimates.reduce((sum, e) => sum + e.weightsBytes, 0),
    kvBytesPerToken: Math.max(...estimates.map((e) => e.kvBytesPerToken)),
    contextLength: Math.max(...estimates.map((e) => e.contextLength)),
  };
}

const splitPart = /^(.*)-\d{5}-of-(\d{5})\.gguf$/i;

/**
 * Whether the runtime loads `path` when it loads `modelFile`: the file itself, or another part of
 * a split model (`name-00001-of-00003.gguf`: llama.cpp reads every part). No model file named: all.
 */
export function loadedWith(path: string, modelFile: string): boolean {
  if (modelFile === "" || path === modelFile) return modelFile === "" || isGguf(path);
  const a = splitPart.exec(path);
  const b = splitPart.exec(modelFile);
  return a !== null && b !== null && a[1] === b[1] && a[2] === b[2];
}
