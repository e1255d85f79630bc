// The runtime engines of the contract: a closed set, named as agents advertise them and runtime
// profiles store them, with the contract's EngineKind for each.
import { EngineKind } from "../gen/proto/modelforge/jobs/v1/jobs_pb.js";

export const engineNames = ["llama.cpp", "openai-http"] as const;
export type EngineName = (typeof engineNames)[number];

/** The engines whose runtimes serve POST /v1/embeddings (openai-http's upstream may not). */
export const embeddingEngineNames: readonly EngineName[] = ["llama.cpp"];

/** EngineKind to name; the kinds not listed (UNSPECIFIED) name no engine. */
export const engineNameOfKind: Partial<Record<EngineKind, EngineName>> = {
  [EngineKind.LLAMA_CPP]: "llama.cpp",
  [EngineKind.OPENAI_HTTP]: "openai-http",
};

/** The engines of an agent's Hello this side knows, in the contract's order; the rest are dropped. */
export function knownEngines(said: readonly string[]): EngineName[] {
  return engineNames.filter((e) => said.includes(e));
}

/**
 * What an agent may advertise beside its engines about how they run: llama.cpp with a CUDA
 * backend (its GPU build on a node with NVIDIA GPUs). Placement asks for it for a profile that
 * offloads layers.
 */
export const engineBackends = ["llama.cpp+cuda"] as const;

/** The engines and engine backends of an agent's Hello this side knows, for the node's record. */
export function knownEnginesAndBackends(said: readonly string[]): string[] {
  return [...knownEngines(said), ...engineBackends.filter((b) => said.includes(b))];
}
