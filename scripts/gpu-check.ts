// Proof on a GPU node that the GPU agent's llama.cpp runs on its GPUs: loads the tiny GGUF (and each
// GGUF named on the command line) with every layer offloaded, as the worker does, and prints the
// backend, the layers offloaded, the GPU memory this process holds (nvidia-smi) and tokens/s on the
// GPU against the CPU. On a machine with no NVIDIA GPU, or where CUDA does not load, it says so in
// one line and exits 0. Only the prebuilt binaries the install carries are used: nothing is
// downloaded or compiled.
//
//   node gpu-check.mjs [model.gguf ...]     (in the GPU agent's directory; scripts/gpu-check.mjs in a checkout)
import { mkdtempSync, rmSync } from "node:fs";
import { availableParallelism, tmpdir } from "node:os";
import { basename, join } from "node:path";
import { collectNvidiaGpus } from "../agent/collectors/inventory.js";
import { sampleGroupGpuMemory } from "../agent/engines/gpu-memory.js";
import { LlamaCppGenerator } from "../agent/engines/llama-cpp/generator.js";
import { parseCompletionRequest } from "../agent/engines/openai-protocol.js";
import { readStat } from "../agent/engines/proc.js";
import { writeTinyLlamaGguf } from "./gguf.js";

const MiB = 2 ** 20;
const generatedTokens = 64;

/** Tokens per second generating `generatedTokens` greedily from a fixed prompt. */
async function tokensPerSecond(generator: LlamaCppGenerator): Promise<number> {
  const request = parseCompletionRequest({ prompt: "The quick brown fox", max_tokens: generatedTokens, temperature: 0 });
  const steps = generator.generate(request, new AbortController().signal);
  for (;;) {
    const step = await steps.next();
    if (step.done) return step.value.timings.predicted_per_second;
  }
}

/** The GPU memory this process's group holds, in MiB, or why it is not known. */
async function vramUsed(): Promise<string> {
  const stat = await readStat(process.pid);
  const bytes = stat === undefined ? undefined : await sampleGroupGpuMemory(stat.pgrp);
  return typeof bytes === "bigint" ? `${Number(bytes) / MiB} MiB` : "unknown (nvidia-smi did not list this process)";
}

/** One model on the GPU, then on the CPU: the report's line, or undefined when CUDA is not usable. */
async function check(label: string, modelPath: string): Promise<string | undefined> {
  let fallback = "";
  const common = { modelPath, contextSize: 512, threads: 1 };
  const onGpu = await LlamaCppGenerator.load({ ...common, gpuLayers: "all", onCpuFallback: (why) => (fallback = why) });
  if (onGpu.backend !== "cuda") {
    process.stdout.write(`gpu-check: CUDA is not usable here (${fallback}); llama.cpp would run on the CPU\n`);
    return undefined;
  }
  const { offloaded, total } = onGpu.layers;
  const vram = await vramUsed();
  const gpuRate = await tokensPerSecond(onGpu);
  await onGpu.dispose();
  const threads = availableParallelism();
  const onCpu = await LlamaCppGenerator.load({ ...common, threads, gpuLayers: 0 });
  const cpuRate = await tokensPerSecond(onCpu);
  await onCpu.dispose();
  const ratio = cpuRate > 0 ? ` (${(gpuRate / cpuRate).toFixed(1)}x)` : "";
  return `${label}: backend cuda, ${offloaded}/${total} layers offloaded, ${vram} of GPU memory, ${gpuRate.toFixed(1)} tokens/s on the GPU, ${cpuRate.toFixed(1)} on ${threads} CPU threads${ratio}`;
}

async function main(models: string[]): Promise<void> {
  // Belt and braces with the generator's build: "never": never fetch a binary.
  process.env.NODE_LLAMA_CPP_SKIP_DOWNLOAD = "true";
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
  try {
    const tiny = join(scratch, "tiny.gguf");
    await writeTinyLlamaGguf(tiny);
    for (const [label, path] of [["tiny test model", tiny], ...models.map((m) => [basename(m), m])] as const) {
      const line = await check(label, path);
      if (line === undefined) return;
      process.stdout.write(`${line}\n`);
    }
  } finally {
    rmSync(scratch, { recursive: true, force: true });
  }
}

main(process.argv.slice(2)).catch((err: unknown) => {
  process.stderr.write(`gpu-check: ${(err as Error).message}\n`);
  process.exit(1);
});
