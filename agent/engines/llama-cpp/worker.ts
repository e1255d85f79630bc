// The llama.cpp runtime process: loads one GGUF file, serves the OpenAI-compatible API on
// 127.0.0.1, and announces its port as one JSON line on stdout once the model is loaded; its
// access lines follow on stdout, its failures go to stderr.
// The agent's supervisor spawns it; it never listens beyond loopback.
import { basename } from "node:path";
import { parseArgs } from "node:util";
import { LlamaCppGenerator } from "./generator.js";
import { checkGgufFile } from "./gguf-header.js";
import { createRuntimeServer } from "./server.js";

/** The line the supervisor waits for. */
export interface ListeningLine {
  event: "listening";
  port: number;
  loadMs: number;
  /** Where the model runs: "cuda" when its layers went to GPUs, else "cpu". */
  backend?: "cpu" | "cuda";
}

async function main(): Promise<void> {
  const { values } = parseArgs({
    options: {
      model: { type: "string" },
      "model-id": { type: "string" },
      port: { type: "string", default: "0" },
      "context-size": { type: "string", default: "1024" },
      threads: { type: "string", default: "1" },
      "gpu-layers": { type: "string", default: "0" },
    },
  });
  if (!values.model) throw new Error("--model is required");
  const port = Number(values.port);
  const contextSize = Number(values["context-size"]);
  const threads = Number(values.threads);
  if (!Number.isInteger(port) || port < 0 || port > 65535) throw new Error("--port must be 0..65535");
  if (!Number.isInteger(contextSize) || contextSize < 16) throw new Error("--context-size must be an integer of at least 16");
  if (!Number.isInteger(threads) || threads < 1) throw new Error("--threads must be a positive integer");
  const gpuLayers = values["gpu-layers"] === "all" ? "all" : Number(values["gpu-layers"]);
  if (gpuLayers !== "all" && (!Number.isInteger(gpuLayers) || gpuLayers < 0))
    throw new Error("--gpu-layers must be all or an integer of at least 0");

  const started = performance.now();
  await checkGgufFile(values.model);
  const generator = await LlamaCppGenerator.load({
    modelPath: values.model,
    contextSize,
    threads,
    gpuLayers,
    // The one line an operator needs when a GPU replica runs slowly: it is on the CPU, and why.
    onCpuFallback: (why) => process.stderr.write(`llama.cpp: CUDA is not usable here (${why}); running on the CPU\n`),
  });
  const loadMs = performance.now() - started;
  const server = createRuntimeServer({ generator, embedder: generator.embedder, modelId: values["model-id"] ?? basename(values.model) });
  server.listen(port, "127.0.0.1", () => {
    const address = server.address();
    const line: ListeningLine = {
      event: "listening",
      port: typeof address === "object" && address ? address.port : port,
      loadMs,
      backend: generator.backend,
    };
    process.stdout.write(`${JSON.stringify(line)}\n`);
  });
  const shutdown = () => {
    server.close();
    server.closeAllConnections();
    process.exit(0);
  };
  process.once("SIGTERM", shutdown);
  process.once("SIGINT", shutdown);
}

main().catch((err: unknown) => {
  process.stderr.write(`llama.cpp runtime failed: ${(err as Error).message}\n`);
  process.exit(1);
});
