// The rules of runtime profiles: the name grammar, the bounds of each engine parameter, and the
// canonical content whose SHA-256 identifies a profile. Pure; the store and the RPCs are around it.
import { createHash } from "node:crypto";
import type { EngineKind } from "../../gen/proto/modelforge/jobs/v1/jobs_pb.js";
import { engineNameOfKind } from "../../common/engines.js";

export class ProfileRuleError extends Error {
  constructor(
    readonly field: string,
    reason: string,
  ) {
    super(`${field}: ${reason}`);
  }
}

export const MAX_CONTEXT_SIZE = 1_048_576;
export const MAX_THREADS = 1024;
export const MAX_MEMORY_BYTES = 2n ** 50n;
export const MAX_GPU_LAYERS = 1024;
export const MAX_GPU_COUNT = 64;
export const MAX_PARALLEL = 256;
export const MAX_BATCH_SIZE = 65_536;
const NAME = /^[a-z0-9][a-z0-9._-]{0,63}$/;

export interface ProfileContent {
  engine: EngineKind;
  contextSize: number;
  threads: number;
  /** Declared RAM of an openai-http profile; absent or 0 for none. */
  memoryBytes?: bigint;
  /** llama.cpp: layers offloaded to the GPUs; absent or 0 for the CPU (unless gpuLayersAll). */
  gpuLayers?: number;
  /** llama.cpp: every layer offloaded. */
  gpuLayersAll?: boolean;
  /** GPUs each replica is assigned; absent or 0 for none. */
  gpuCount?: number;
  /** openai-http: device memory its server takes on each assigned GPU. */
  gpuMemoryBytes?: bigint;
  /** Replicas may share a GPU with others that allow it too. */
  gpuShared?: boolean;
  /** llama.cpp: requests generated at once; absent or 0 for the control plane's choice per model. */
  parallel?: number;
  /** llama.cpp: tokens per decode batch; absent or 0 for the engine's default. */
  batchSize?: number;
  /** llama.cpp: the runtime serves /v1/embeddings too. */
  embeddings?: boolean;
}

export function checkProfileName(name: string, field = "name"): void {
  if (!NAME.test(name)) {
    throw new ProfileRuleError(field, "must be 1 to 64 characters of a-z, 0-9, '.', '_' and '-', starting with a letter or digit");
  }
}

export function checkProfileContent(p: ProfileContent): void {
  if (engineNameOfKind[p.engine] === undefined) throw new ProfileRuleError("engine", "must name an engine (llama.cpp or openai-http)");
  if (!Number.isInteger(p.contextSize) || p.contextSize < 0 || p.contextSize > MAX_CONTEXT_SIZE) {
    throw new ProfileRuleError("context_size", `must be from 0 (the engine's default) to ${MAX_CONTEXT_SIZE}`);
  }
  if (!Number.isInteger(p.threads) || p.threads < 0 || p.threads > MAX_THREADS) {
    throw new ProfileRuleError("threads", `must be from 0 (the engine's default) to ${MAX_THREADS}`);
  }
  const memory = p.memoryBytes ?? 0n;
  if (memory < 0n || memory > MAX_MEMORY_BYTES) throw new ProfileRuleError("memory_bytes", "must be from 0 to 2^50 (1 PiB)");
  if (memory > 0n && engineNameOfKind[p.engine] !== "openai-http") {
    throw new ProfileRuleError("memory_bytes", "only an openai-http profile declares memory; llama.cpp's is estimated from the model");
  }
  checkGpuNeed(p);
  checkBatching(p);
}

/** The batching fields: bounded, and only for the built-in engine (an openai-http server batches itself). */
function checkBatching(p: ProfileContent): void {
  const parallel = p.parallel ?? 0;
  const batchSize = p.batchSize ?? 0;
  if (!Number.isInteger(parallel) || parallel < 0 || parallel > MAX_PARALLEL) {
    throw new ProfileRuleError("parallel", `must be from 0 (chosen from the model) to ${MAX_PARALLEL}`);
  }
  if (!Number.isInteger(batchSize) || batchSize < 0 || batchSize > MAX_BATCH_SIZE) {
    throw new ProfileRuleError("batch_size", `must be from 0 (the engine's default) to ${MAX_BATCH_SIZE}`);
  }
  const llama = engineNameOfKind[p.engine] === "llama.cpp";
  if (!llama && parallel > 0)
    throw new ProfileRuleError("parallel", "only a llama.cpp profile sets parallel; an openai-http server schedules its own");
  if (!llama && batchSize > 0) throw new ProfileRuleError("batch_size", "only a llama.cpp profile sets batch_size");
  if (!llama && p.embeddings === true) {
    throw new ProfileRuleError("embeddings", "only a llama.cpp profile turns embeddings on; an openai-http server serves what it serves");
  }
}

/** The GPU fields: bounded, and consistent with the engine and with each other. */
function checkGpuNeed(p: ProfileContent): void {
  const layers = p.gpuLayers ?? 0;
  const count = p.gpuCount ?? 0;
  const gpuMemory = p.gpuMemoryBytes ?? 0n;
  const llama = engineNameOfKind[p.engine] === "llama.cpp";
  if (!Number.isInteger(layers) || layers < 0 || layers > MAX_GPU_LAYERS) {
    throw new ProfileRuleError("gpu_layers", `must be from 0 (the CPU) to ${MAX_GPU_LAYERS}; use gpu_layers_all for every layer`);
  }
  if (!Number.isInteger(count) || count < 0 || count > MAX_GPU_COUNT) {
    throw new ProfileRuleError("gpu_count", `must be from 0 to ${MAX_GPU_COUNT}`);
  }
  if (gpuMemory < 0n || gpuMemory > MAX_MEMORY_BYTES) throw new ProfileRuleError("gpu_memory_bytes", "must be from 0 to 2^50 (1 PiB)");
  const offloads = layers > 0 || p.gpuLayersAll === true;
  if (!llama && offloads)
    throw new ProfileRuleError("gpu_layers", "only a llama.cpp profile offloads layers; an openai-http server is told {gpu_count}");
  if (layers > 0 && p.gpuLayersAll === true)
    throw new ProfileRuleError("gpu_layers", "give a number of layers or gpu_layers_all, not both");
  if (llama && gpuMemory > 0n) {
    throw new ProfileRuleError(
      "gpu_memory_bytes",
      "only an openai-http profile declares GPU memory; llama.cpp's is estimated from the model",
    );
  }
  if (llama && offloads && count === 0) throw new ProfileRuleError("gpu_count", "must be at least 1 to offload layers to GPUs");
  if (llama && !offloads && count > 0)
    throw new ProfileRuleError("gpu_layers", "a profile given GPUs must offload layers (a number or gpu_layers_all)");
  if (!llama && gpuMemory > 0n && count === 0) throw new ProfileRuleError("gpu_count", "must be at least 1 to declare GPU memory");
  if (p.gpuShared === true && count === 0) throw new ProfileRuleError("gpu_shared", "only a profile given GPUs (gpu_count) can share them");
}

export function engineName(engine: EngineKind): string {
  const name = engineNameOfKind[engine];
  if (name === undefined) throw new ProfileRuleError("engine", `unknown engine ${engine}`);
  return name;
}

export function engineOfName(name: string): EngineKind {
  for (const [kind, n] of Object.entries(engineNameOfKind)) if (n === name) return Number(kind) as EngineKind;
  throw new Error(`a stored runtime profile names an engine this server does not know: ${JSON.stringify(name)}`);
}

/**
 * The SHA-256 of a profile's canonical content: fixed key order, engine by its contract name, so
 * equal profiles hash equal whatever produced them, and a hash never changes with a proto rename.
 */
export function profileContentHash(p: ProfileContent): string {
  // Declared memory joins the content only when set, so every profile made before it keeps its hash.
  const memory = p.memoryBytes ?? 0n;
  const canonical = JSON.stringify({
    v: 1,
    engine: engineName(p.engine),
    contextSize: p.contextSize,
    threads: p.threads,
    ...(memory > 0n ? { memoryBytes: String(memory) } : {}),
    // The same for the GPU fields: absent while unset, so a CPU profile's hash is as it was.
    ...((p.gpuLayers ?? 0) > 0 ? { gpuLayers: p.gpuLayers } : {}),
    ...(p.gpuLayersAll === true ? { gpuLayersAll: true } : {}),
    ...((p.gpuCount ?? 0) > 0 ? { gpuCount: p.gpuCount } : {}),
    ...((p.gpuMemoryBytes ?? 0n) > 0n ? { gpuMemoryBytes: String(p.gpuMemoryBytes) } : {}),
    ...(p.gpuShared === true ? { gpuShared: true } : {}),
    ...((p.parallel ?? 0) > 0 ? { parallel: p.parallel } : {}),
    ...((p.batchSize ?? 0) > 0 ? { batchSize: p.batchSize } : {}),
    ...(p.embeddings === true ? { embeddings: true } : {}),
  });
  return createHash("sha256").update(canonical).digest("hex");
}
