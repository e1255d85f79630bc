// Embeddings of one loaded GGUF model through node-llama-cpp's embedding context, made on the
// first request (a runtime that never embeds never pays its memory) and reused after it.
import type { LlamaEmbeddingContext, LlamaModel } from "node-llama-cpp";
import { OpenAiError } from "../openai-protocol.js";

export interface EmbeddingResult {
  vectors: number[][];
  promptTokens: number;
}

/** What the HTTP server needs to answer /v1/embeddings. */
export interface TextEmbedder {
  embed(inputs: readonly string[], signal: AbortSignal): Promise<EmbeddingResult>;
}

export class LlamaCppEmbedder implements TextEmbedder {
  private context: Promise<LlamaEmbeddingContext> | undefined;

  constructor(
    private readonly model: LlamaModel,
    private readonly contextSize: number,
    private readonly threads: number,
  ) {}

  async embed(inputs: readonly string[], signal: AbortSignal): Promise<EmbeddingResult> {
    // Counted and checked before any evaluation, so an input too long refuses the whole request.
    const counts = inputs.map((input, i) => {
      const n = this.model.tokenize(input).length;
      if (n >= this.contextSize) {
        throw new OpenAiError(
          400,
          "invalid_request_error",
          "context_length_exceeded",
          `input[${i}] (${n} tokens) does not fit the context size ${this.contextSize}`,
          "input",
        );
      }
      return n;
    });
    this.context ??= this.model.createEmbeddingContext({ contextSize: this.contextSize, threads: this.threads });
    const context = await this.context;
    const vectors: number[][] = [];
    for (const input of inputs) {
      if (signal.aborted) throw new OpenAiError(499, "invalid_request_error", "cancelled", "the client went away");
      vectors.push([...(await context.getEmbeddingFor(input)).vector]);
    }
    return { vectors, promptTokens: counts.reduce((a, b) => a + b, 0) };
  }
}
