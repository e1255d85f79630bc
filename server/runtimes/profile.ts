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
const NAME = /^[a-z0-9][a-z0-9._-]{0,63}$/;

export interface ProfileContent {
  engine: EngineKind;
  contextSize: number;
  threads: number;
  /** Declared RAM of an openai-http profile; absent or 0 for none. */
  memoryBytes?: bigint;
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
  });
  return createHash("sha256").update(canonical).digest("hex");
}
