// One GGUF model loaded with node-llama-cpp, generating for one request at a time. Only prebuilt
// binaries that ship inside the npm packages are used (the CPU build; the CUDA build in a GPU
// install): nothing is downloaded or compiled, ever.
import {
  getLlama,
  resolveChatWrapper,
  type Llama,
  type LlamaContextSequence,
  type LlamaModel,
  type ChatHistoryItem,
  type Token,
} from "node-llama-cpp";
import { OpenAiError, type FinishReason, type GenerationRequest, type Timings } from "../openai-protocol.js";
import { TextStream } from "./text-stream.js";
import { LlamaCppEmbedder } from "./embedder.js";
import { hasLlamaCudaBuild } from "../gpus.js";

export interface GeneratorOptions {
  modelPath: string;
  contextSize: number;
  threads: number;
  /** Layers offloaded to CUDA GPUs (those CUDA_VISIBLE_DEVICES leaves visible), or all; 0 for the CPU. */
  gpuLayers?: number | "all";
  /** Told once when CUDA was asked for but is not usable here, so the model runs on the CPU. */
  onCpuFallback?: (why: string) => void;
}

/** Where the model runs. */
export type LlamaBackend = "cpu" | "cuda";

export interface GenerationResult {
  text: string;
  finishReason: FinishReason;
  promptTokens: number;
  /** Counted as the engine produced them, not by tokenising the text again. */
  completionTokens: number;
  timings: Timings;
}

/** One step of a generation: the text it released and the tokens so far. */
export interface GenerationStep {
  delta: string;
  promptTokens: number;
  completionTokens: number;
}

/** What the HTTP server needs from an engine; the generator below is the llama.cpp one. */
export interface TextGenerator {
  /** Yields text as tokens are produced, with the counts so far; returns the totals. Stops early when `signal` aborts. */
  generate(request: GenerationRequest, signal: AbortSignal): AsyncGenerator<GenerationStep, GenerationResult>;
}

/**
 * node-llama-cpp's prebuilt binaries only, never a download or a build: CUDA when layers are to be
 * offloaded and this install carries the CUDA build and the driver loads it; otherwise the CPU
 * build, and the caller is told why once.
 */
async function openLlama(options: GeneratorOptions): Promise<{ llama: Llama; backend: LlamaBackend }> {
  const open = (gpu: "cuda" | false) =>
    getLlama({
      gpu,
      build: "never",
      skipDownload: true,
      usePrebuiltBinaries: true,
      progressLogs: false,
      // One thread: on a small shared machine the default thread count was many times slower.
      maxThreads: options.threads,
    });
  const wanted = options.gpuLayers === "all" || (options.gpuLayers ?? 0) > 0;
  if (wanted) {
    try {
      const llama = await open("cuda");
      if (llama.gpu === "cuda") return { llama, backend: "cuda" };
      options.onCpuFallback?.("node-llama-cpp opened no CUDA backend");
    } catch (err) {
      options.onCpuFallback?.(await cudaUnusable(err as Error));
    }
  }
  return { llama: await open(false), backend: "cpu" };
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
 * Why node-llama-cpp opened no CUDA build, for the fallback line: the install has none, or the
 * node lacks the NVIDIA driver or a CUDA runtime the build links against (docs/gpus.md).
 */
async function cudaUnusable(err: Error): Promise<string> {
  if (!(await hasLlamaCudaBuild())) return "no CUDA build in this install";
  if (!loaderFinds("libcuda.so.1")) return "the CUDA build failed to load libcuda.so.1: no NVIDIA driver";
  const runtime = (v: number) => loaderFinds(`libcudart.so.${v}`) && loaderFinds(`libcublas.so.${v}`);
  if (!runtime(13) && !runtime(12)) return "the CUDA build failed to load libcudart and libcublas: no CUDA 13 or 12 runtime";
  return `the CUDA build did not load: ${err.message.split("\n")[0]!.slice(0, 200)}`;
}

export class LlamaCppGenerator implements TextGenerator {
  /** The same model's embeddings, for /v1/embeddings. */
  readonly embedder: LlamaCppEmbedder;

  private constructor(
    private readonly model: LlamaModel,
    private readonly sequence: LlamaContextSequence,
    readonly contextSize: number,
    threads: number,
    /** Where it runs: what the worker announces. */
    readonly backend: LlamaBackend,
  ) {
    this.embedder = new LlamaCppEmbedder(model, contextSize, threads);
  }

  static async load(options: GeneratorOptions): Promise<LlamaCppGenerator> {
    const { llama, backend } = await openLlama(options);
    const gpuLayers = backend === "cuda" ? (options.gpuLayers === "all" ? "max" : options.gpuLayers) : 0;
    const model = await llama.loadModel({ modelPath: options.modelPath, gpuLayers });
    const contextSize = Math.min(options.contextSize, model.trainContextSize);
    const context = await model.createContext({ contextSize, threads: options.threads });
    return new LlamaCppGenerator(model, context.getSequence(), contextSize, options.threads, backend);
  }

  /** Layers on the GPU, of the model's total (scripts/gpu-check.ts reports them). */
  get layers(): { offloaded: number; total: number } {
    return { offloaded: this.model.gpuLayers, total: this.model.fileInsights.totalLayers };
  }

  /** Frees the model and its context (scripts/gpu-check.ts loads one model twice). */
  async dispose(): Promise<void> {
    await this.model.dispose();
  }

  async *generate(request: GenerationRequest, signal: AbortSignal): AsyncGenerator<GenerationStep, GenerationResult> {
    const { tokens: prompt, stops } = this.prompt(request);
    if (prompt.length + request.maxTokens > this.contextSize) {
      throw new OpenAiError(
        400,
        "invalid_request_error",
        "context_length_exceeded",
        `the prompt (${prompt.length} tokens) plus max_tokens (${request.maxTokens}) exceeds the context size ${this.contextSize}`,
        "max_tokens",
      );
    }
    await this.sequence.clearHistory();
    const stream = new TextStream([...request.stop, ...stops]);
    const generated: Token[] = [];
    let finishReason: FinishReason = "length";
    const started = performance.now();
    let firstAt = started;
    let full = "";
    const sampling = { temperature: request.temperature, ...(request.seed !== undefined ? { seed: request.seed } : {}) };
    for await (const token of this.sequence.evaluate(prompt, sampling)) {
      if (signal.aborted) break;
      if (this.model.isEogToken(token)) {
        finishReason = "stop";
        break;
      }
      if (generated.length === 0) firstAt = performance.now();
      generated.push(token);
      full = this.model.detokenize(generated);
      const { delta, stopped } = stream.next(full);
      if (delta) yield { delta, promptTokens: prompt.length, completionTokens: generated.length };
      if (stopped) {
        finishReason = "stop";
        break;
      }
      if (generated.length >= request.maxTokens) break;
    }
    const ended = performance.now();
    const rest = stream.finish(full);
    if (rest) yield { delta: rest, promptTokens: prompt.length, completionTokens: generated.length };
    const predictedMs = generated.length > 1 ? ended - firstAt : 0;
    return {
      text: stream.text(full),
      finishReason,
      promptTokens: prompt.length,
      completionTokens: generated.length,
      timings: {
        prompt_n: prompt.length,
        prompt_ms: firstAt - started,
        predicted_n: generated.length,
        predicted_ms: predictedMs,
        predicted_per_second: predictedMs > 0 ? ((generated.length - 1) * 1000) / predictedMs : 0,
      },
    };
  }

  /** The prompt's tokens; a chat is rendered by the model's own chat template. */
  private prompt(request: GenerationRequest): { tokens: Token[]; stops: string[] } {
    if (request.kind === "completion") {
      const bos = this.model.tokens.bos;
      const text = this.model.tokenize(request.prompt);
      return { tokens: this.model.tokens.shouldPrependBosToken && bos !== null ? [bos, ...text] : text, stops: [] };
    }
    const history: ChatHistoryItem[] = request.messages.map((m) =>
      m.role === "assistant" ? { type: "model", response: [m.content] } : { type: m.role, text: m.content },
    );
    history.push({ type: "model", response: [] });
    const state = resolveChatWrapper(this.model).generateContextState({ chatHistory: history });
    // Plain-text stop triggers of the template; special-token ones end generation as end-of-generation tokens.
    const stops = state.stopGenerationTriggers
      .filter((t) => t.values.every((v) => typeof v === "string"))
      .map((t) => t.values.join(""))
      .filter((s) => s.length > 0);
    return { tokens: state.contextText.tokenize(this.model.tokenizer), stops };
  }
}
