// One GGUF model loaded with node-llama-cpp, generating for one request at a time. Only the CPU
// build that ships inside the npm package is used: nothing is downloaded or compiled, ever.
import { getLlama, resolveChatWrapper, type LlamaContextSequence, type LlamaModel, type ChatHistoryItem, type Token } from "node-llama-cpp";
import { OpenAiError, type FinishReason, type GenerationRequest, type Timings } from "../openai-protocol.js";
import { TextStream } from "./text-stream.js";
import { LlamaCppEmbedder } from "./embedder.js";

export interface GeneratorOptions {
  modelPath: string;
  contextSize: number;
  threads: number;
}

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

export class LlamaCppGenerator implements TextGenerator {
  /** The same model's embeddings, for /v1/embeddings. */
  readonly embedder: LlamaCppEmbedder;

  private constructor(
    private readonly model: LlamaModel,
    private readonly sequence: LlamaContextSequence,
    readonly contextSize: number,
    threads: number,
  ) {
    this.embedder = new LlamaCppEmbedder(model, contextSize, threads);
  }

  static async load(options: GeneratorOptions): Promise<LlamaCppGenerator> {
    const llama = await getLlama({
      gpu: false,
      build: "never",
      skipDownload: true,
      usePrebuiltBinaries: true,
      progressLogs: false,
      // One thread: on a small shared machine the default thread count was many times slower.
      maxThreads: options.threads,
    });
    const model = await llama.loadModel({ modelPath: options.modelPath });
    const contextSize = Math.min(options.contextSize, model.trainContextSize);
    const context = await model.createContext({ contextSize, threads: options.threads });
    return new LlamaCppGenerator(model, context.getSequence(), contextSize, options.threads);
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
