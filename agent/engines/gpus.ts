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
 * node-llama-cpp's prebuilt CUDA packages this install carries (the GPU agent), nearest first, each
 * with its ggml CUDA backend and the CUDA major it links against. The CPU install points the
 * packages at an empty stand-in (package.json overrides), which has no binaries.
 */
const cudaPackages = [
  { name: "@node-llama-cpp/linux-x64-cuda", library: "bins/linux-x64-cuda/libggml-cuda.so", cuda: 13 },
  { name: "@node-llama-cpp/linux-x64-cuda-ext", library: "bins/linux-x64-cuda/fallback/libggml-cuda.so", cuda: 12 },
];

/** The CUDA backend libraries this install carries, by CUDA major. */
async function carriedCudaBackends(): Promise<{ library: string; cuda: number }[]> {
  const found: { library: string; cuda: number }[] = [];
  for (const p of cudaPackages) {
    try {
      // Inside the try: a single-executable agent may have no module URL to resolve from.
      for (const dir of createRequire(import.meta.url).resolve.paths(p.name) ?? []) {
        const manifest = await readFile(join(dir, p.name, "package.json"), "utf8").catch(() => undefined);
        if (manifest === undefined) continue;
        // The nearest one is what module resolution would give.
        if ((JSON.parse(manifest) as { name?: string }).name === p.name)
          found.push({ library: join(dir, p.name, p.library), cuda: p.cuda });
        break;
      }
    } catch {
      /* no module URL */
    }
  }
  return found;
}

/** Whether this install carries a CUDA build of llama.cpp at all (the agent advertises llama.cpp+cuda). */
export async function hasLlamaCudaBuild(): Promise<boolean> {
  return (await carriedCudaBackends()).length > 0;
}

/** Whether the dynamic loader finds `library` (a bare soname: the loader path decides). */
function loaderFinds(library: string): boolean {
  try {
    process.dlopen({ exports: {} } as NodeJS.Module, library);
    return true;
  } catch (err) {
    // Opened, but not a Node addon: it is there.
    return !(err as Error).message.includes("cannot open shared object file");
  }
}

/**
 * The CUDA backend llama-server loads for a GPU replica: the carried build whose CUDA runtime this
 * node has (13 before 12), or why there is none (docs/gpus.md), for the runtime's log.
 */
export async function cudaBackend(): Promise<{ library: string; reason?: undefined } | { library?: undefined; reason: string }> {
  const carried = await carriedCudaBackends();
  if (carried.length === 0) return { reason: "no CUDA build in this install" };
  if (!loaderFinds("libcuda.so.1")) return { reason: "no NVIDIA driver (libcuda.so.1 is not found)" };
  for (const c of carried) {
    if (loaderFinds(`libcudart.so.${c.cuda}`) && loaderFinds(`libcublas.so.${c.cuda}`)) return { library: c.library };
  }
  return { reason: `no CUDA ${carried.map((c) => c.cuda).join(" or ")} runtime (libcudart and libcublas) is found` };
}
