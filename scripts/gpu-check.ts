// Proof on a GPU node that the GPU agent's llama.cpp runs on its GPUs: starts llama-server on the
// tiny GGUF (and each GGUF named on the command line) with every layer offloaded to GPU 0, through
// the agent's own supervisor, and prints the backend, the layers offloaded (llama-server's log),
// the GPU memory the runtime holds (nvidia-smi) and tokens/s on the GPU against the CPU. On a
// machine with no NVIDIA GPU, or where CUDA does not load, it says so in one line and exits 0.
// Only what the install carries is used: nothing is downloaded or compiled.
//
//   node gpu-check.mjs [model.gguf ...]     (in the GPU agent's directory; scripts/gpu-check.ts in a checkout)
import { mkdtempSync, rmSync } from "node:fs";
import { availableParallelism, tmpdir } from "node:os";
import { basename, join } from "node:path";
import { collectNvidiaGpus } from "../agent/collectors/inventory.js";
import { sampleGroupGpuMemory } from "../agent/engines/gpu-memory.js";
import type { AssignedDevice } from "../agent/engines/gpus.js";
import { Supervisor, type Runtime } from "../agent/engines/supervisor.js";
import { writeTinyLlamaGguf } from "./gguf.js";

const MiB = 2 ** 20;
const generatedTokens = 64;

/** Tokens per second generating `generatedTokens` greedily from a fixed prompt, as llama-server timed them. */
async function tokensPerSecond(runtime: Runtime): Promise<number> {
  const answer = await runtime.client.completion("The quick brown fox", { max_tokens: generatedTokens, temperature: 0 });
  return answer.timings?.predicted_per_second ?? 0;
}

/** The GPU memory the runtime's process group holds, in MiB, or why it is not known. */
async function vramUsed(runtime: Runtime): Promise<string> {
  const bytes = await sampleGroupGpuMemory(runtime.pid);
  return typeof bytes === "bigint" ? `${Number(bytes) / MiB} MiB` : "unknown (nvidia-smi did not list the runtime)";
}

/** One model on the GPU, then on the CPU: the report's line, or undefined when CUDA is not usable. */
async function check(supervisor: Supervisor, gpu: AssignedDevice, label: string, modelPath: string): Promise<string | undefined> {
  let log = "";
  const onOutput = (_: string, chunk: Buffer) => (log = (log + chunk.toString()).slice(-65_536));
  const onGpu = await supervisor.start("llama.cpp", { modelPath, params: { contextSize: 512, gpuLayers: "all" }, gpus: [gpu], onOutput });
  try {
    if (onGpu.backend !== "cuda") {
      const why = /running on the CPU: (.*)/.exec(log)?.[1] ?? "no CUDA backend";
      process.stdout.write(`gpu-check: CUDA is not usable here (${why}); llama.cpp would run on the CPU\n`);
      return undefined;
    }
    const layers = /offloaded (\d+)\/(\d+) layers to GPU/.exec(log);
    const vram = await vramUsed(onGpu);
    const gpuRate = await tokensPerSecond(onGpu);
    const threads = availableParallelism();
    const onCpu = await supervisor.start("llama.cpp", { modelPath, params: { contextSize: 512, threads } });
    const cpuRate = await tokensPerSecond(onCpu).finally(() => supervisor.stop(onCpu.id));
    const ratio = cpuRate > 0 ? ` (${(gpuRate / cpuRate).toFixed(1)}x)` : "";
    const offloaded = layers === null ? "an unknown number of layers" : `${layers[1]}/${layers[2]} layers`;
    return `${label}: backend cuda, ${offloaded} offloaded, ${vram} of GPU memory, ${gpuRate.toFixed(1)} tokens/s on the GPU, ${cpuRate.toFixed(1)} on ${threads} CPU threads${ratio}`;
  } finally {
    await supervisor.stop(onGpu.id);
  }
}

async function main(models: string[]): Promise<void> {
  const gpus = await collectNvidiaGpus();
  if (gpus.gpus.length === 0) {
    const why = gpus.complete ? "nvidia-smi is not installed or lists no GPU" : `nvidia-smi failed: ${gpus.error}`;
    process.stdout.write(`gpu-check: no NVIDIA GPU here (${why}); nothing to check\n`);
    return;
  }
  for (const g of gpus.gpus) {
    process.stdout.write(`GPU ${g.index}: ${g.model}, ${Number(g.memoryTotalBytes) / MiB} MiB, driver ${g.driverVersion}\n`);
  }
  const scratch = mkdtempSync(join(tmpdir(), "gpu-check-"));
  const supervisor = new Supervisor({ registryPath: join(scratch, "runtimes.json") });
  try {
    const tiny = join(scratch, "tiny.gguf");
    await writeTinyLlamaGguf(tiny);
    const gpu = { uuid: gpus.gpus[0]!.uuid, index: gpus.gpus[0]!.index };
    for (const [label, path] of [["tiny test model", tiny], ...models.map((m) => [basename(m), m])] as const) {
      const line = await check(supervisor, gpu, label, path);
      if (line === undefined) return;
      process.stdout.write(`${line}\n`);
    }
  } finally {
    await supervisor.stopAll();
    rmSync(scratch, { recursive: true, force: true });
  }
}

main(process.argv.slice(2)).catch((err: unknown) => {
  process.stderr.write(`gpu-check: ${(err as Error).message}\n`);
  process.exit(1);
});
