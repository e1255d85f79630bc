// The runtime engines of the contract: a closed set, named as agents advertise them and runtime
// profiles store them.
export const engineNames = ["llama.cpp", "openai-http"] as const;
export type EngineName = (typeof engineNames)[number];

/** The engines of an agent's Hello this side knows, in the contract's order; the rest are dropped. */
export function knownEngines(said: readonly string[]): EngineName[] {
  return engineNames.filter((e) => said.includes(e));
}
