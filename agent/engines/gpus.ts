// The GPUs a runtime is given: the lease names them (UUID and index, as placement assigned them);
// the agent checks it has each, then confines the runtime to them through CUDA_VISIBLE_DEVICES.
import { readFile } from "node:fs/promises";
import { createRequire } from "node:module";
import { join } from "node:path";

/** One GPU of a lease. */
export interface AssignedDevice {
  uuid: string;
  index: number;
}

/**
 * Why the node cannot honour an assignment, or undefined when it can: each GPU must be one the
 * node has now, at the same index (devices re-enumerated since placement are another GPU to CUDA).
 */
export function unavailableGpus(assigned: readonly AssignedDevice[], have: readonly AssignedDevice[]): string | undefined {
  const problems = assigned.flatMap((g) => {
    const mine = have.find((h) => h.uuid === g.uuid);
    if (mine === undefined) return [`GPU ${g.uuid} (index ${g.index}) is not on this node`];
    if (mine.index !== g.index) return [`GPU ${g.uuid} is at index ${mine.index} here, not ${g.index}`];
    return [];
  });
  if (new Set(assigned.map((g) => g.uuid)).size !== assigned.length) problems.push("the lease names a GPU twice");
  return problems.length === 0 ? undefined : problems.join("; ");
}

/**
 * The environment that confines a runtime to its GPUs; empty when it was assigned none (what it
 * sees is then the operator's business, as before GPUs were assigned). CUDA numbers devices
 * fastest-first unless told PCI_BUS_ID, which is the order nvidia-smi's indices follow.
 */
export function gpuEnv(assigned: readonly AssignedDevice[]): Record<string, string> {
  if (assigned.length === 0) return {};
  return { CUDA_DEVICE_ORDER: "PCI_BUS_ID", CUDA_VISIBLE_DEVICES: assigned.map((g) => g.index).join(",") };
}

/**
 * Whether this install carries node-llama-cpp's prebuilt CUDA binaries: the CPU install points the
 * package at an empty stand-in (package.json overrides), which has no binaries. The package is
 * looked for where module resolution would find it (its exports do not include package.json).
 */
export async function hasLlamaCudaBuild(): Promise<boolean> {
  for (const name of ["@node-llama-cpp/linux-x64-cuda", "@node-llama-cpp/linux-x64-cuda-ext"]) {
    try {
      // Inside the try: a single-executable agent may have no module URL to resolve from.
      const dirs = createRequire(import.meta.url).resolve.paths(name) ?? [];
      for (const dir of dirs) {
        const manifest = await readFile(join(dir, name, "package.json"), "utf8").catch(() => undefined);
        if (manifest !== undefined) {
          // The nearest one is what node-llama-cpp imports.
          if ((JSON.parse(manifest) as { name?: string }).name === name) return true;
          break;
        }
      }
    } catch {
      /* no module URL */
    }
  }
  return false;
}
