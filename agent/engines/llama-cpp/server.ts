// The OpenAI-compatible HTTP API of a runtime, on loopback only: /health, /v1/models,
// /v1/completions and /v1/chat/completions (JSON or server-sent events), and /v1/embeddings when
// it has an embedder. One generation (or embedding) at a time: a second concurrent one is
// refused with 429 rather than queued behind an unbounded wait.
import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import { randomUUID } from "node:crypto";
import {
  limits,
  OpenAiError,
  parseChatRequest,
  parseCompletionRequest,
  parseEmbeddingRequest,
  type EmbeddingRequest,
  type EmbeddingResponse,
  type ChatCompletionChunk,
  type ChatCompletionResponse,
  type CompletionResponse,
  type GenerationRequest,
  type ModelList,
  type Usage,
} from "../openai-protocol.js";
import type { GenerationResult, TextGenerator } from "./generator.js";
import type { TextEmbedder } from "./embedder.js";

export interface RuntimeServerOptions {
  generator: TextGenerator;
  /** Answers /v1/embeddings; without it that route is 404. */
  embedder?: TextEmbedder;
  /** The id /v1/models lists and requests may name. */
  modelId: string;
}

export function createRuntimeServer({ generator, embedder, modelId }: RuntimeServerOptions): Server {
  const api = new RuntimeApi(generator, embedder, modelId);
  return createServer((req, res) => {
    if (req.method === "POST") logAccess(req, res);
    api.handle(req, res).catch((err: unknown) => answerFailure(res, err));
  });
}

/** The API's routes over one generator, which generates for one request at a time. */
class RuntimeApi {
  private readonly created = Math.floor(Date.now() / 1000);
  private busy = false;

  constructor(
    private readonly generator: TextGenerator,
    private readonly embedder: TextEmbedder | undefined,
    private readonly modelId: string,
  ) {}

  async handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const path = (req.url ?? "/").split("?")[0];
    const route = path === "/v1/embeddings" && this.embedder === undefined ? undefined : routes[path ?? ""];
    if (route === undefined) throw new OpenAiError(404, "not_found_error", "not_found", "no such route");
    if (req.method !== route) throw new OpenAiError(405, "invalid_request_error", "method_not_allowed", `use ${route}`);
    if (path === "/health") return json(res, 200, { status: "ok" });
    if (path === "/v1/models") {
      const list: ModelList = {
        object: "list",
        data: [{ id: this.modelId, object: "model", created: this.created, owned_by: "modelforge" }],
      };
      return json(res, 200, list);
    }
    const body = await readJson(req);
    if (path === "/v1/embeddings") {
      const asked = parseEmbeddingRequest(body);
      return this.exclusively(res, asked, (signal) => this.embed(res, asked, signal));
    }
    const request = path === "/v1/completions" ? parseCompletionRequest(body) : parseChatRequest(body);
    await this.exclusively(res, request, (signal) =>
      request.stream ? this.stream(res, request, signal) : this.respond(res, request, signal),
    );
  }

  /** Runs one request's work while no other runs, stopped when its client goes away. */
  private async exclusively(res: ServerResponse, request: { model: string | undefined }, work: (signal: AbortSignal) => Promise<void>) {
    if (request.model !== undefined && request.model !== this.modelId) {
      throw new OpenAiError(404, "not_found_error", "model_not_found", "this runtime does not serve that model", "model");
    }
    if (this.busy) throw new OpenAiError(429, "rate_limit_error", "runtime_busy", "the runtime is generating for another request");
    this.busy = true;
    const abort = new AbortController();
    // The client went away: stop generating for nobody.
    res.on("close", () => abort.abort());
    try {
      await work(abort.signal);
    } finally {
      this.busy = false;
    }
  }

  private async embed(res: ServerResponse, request: EmbeddingRequest, signal: AbortSignal): Promise<void> {
    const { vectors, promptTokens } = await this.embedder!.embed(request.inputs, signal);
    const body: EmbeddingResponse = {
      object: "list",
      data: vectors.map((v, index) => ({ object: "embedding", index, embedding: request.encoding === "base64" ? base64Floats(v) : v })),
      model: this.modelId,
      usage: { prompt_tokens: promptTokens, total_tokens: promptTokens },
    };
    json(res, 200, body);
  }

  private async respond(res: ServerResponse, request: GenerationRequest, signal: AbortSignal): Promise<void> {
    const gen = this.generator.generate(request, signal);
    let step = await gen.next();
    while (!step.done) step = await gen.next();
    const result = step.value;
    const base = { id: generationId(request), created: Math.floor(Date.now() / 1000), model: this.modelId };
    if (request.kind === "chat") {
      const body: ChatCompletionResponse = {
        id: base.id,
        object: "chat.completion",
        created: base.created,
        model: base.model,
        choices: [{ index: 0, message: { role: "assistant", content: result.text }, finish_reason: result.finishReason }],
        usage: usage(result),
        timings: result.timings,
      };
      return json(res, 200, body);
    }
    const body: CompletionResponse = {
      id: base.id,
      object: "text_completion",
      created: base.created,
      model: base.model,
      choices: [{ index: 0, text: result.text, finish_reason: result.finishReason, logprobs: null }],
      usage: usage(result),
      timings: result.timings,
    };
    json(res, 200, body);
  }

  private async stream(res: ServerResponse, request: GenerationRequest, signal: AbortSignal): Promise<void> {
    const chunk = chunkMaker(request, { id: generationId(request), created: Math.floor(Date.now() / 1000), model: this.modelId });
    const gen = this.generator.generate(request, signal);
    // The first step may refuse the request (context too long): answer with a status, not a stream.
    let step = await gen.next();
    res.writeHead(200, { "content-type": "text/event-stream", "cache-control": "no-cache" });
    const send = (data: unknown) => res.write(`data: ${JSON.stringify(data)}\n\n`);
    if (request.kind === "chat") send(chunk("", null, true));
    while (!step.done) {
      const { delta, promptTokens, completionTokens } = step.value;
      // Every chunk says the tokens so far when asked (vLLM's continuous_usage_stats), so a stream cut
      // short is still counted exactly.
      send(request.continuousUsage ? { ...chunk(delta, null), usage: usage({ promptTokens, completionTokens }) } : chunk(delta, null));
      step = await gen.next();
    }
    const result = step.value;
    send({ ...chunk(undefined, result.finishReason), timings: result.timings });
    if (request.includeUsage) send({ ...chunk(undefined, null), choices: [], usage: usage(result) });
    res.end("data: [DONE]\n\n");
  }
}

function generationId(request: GenerationRequest): string {
  return `${request.kind === "chat" ? "chatcmpl" : "cmpl"}-${randomUUID()}`;
}

/** Builds the stream's chunks of one generation, in the shape of its kind. */
function chunkMaker(request: GenerationRequest, base: { id: string; created: number; model: string }) {
  return (text: string | undefined, finish: GenerationResult["finishReason"] | null, first = false) =>
    request.kind === "chat"
      ? ({
          id: base.id,
          object: "chat.completion.chunk",
          created: base.created,
          model: base.model,
          choices: [
            {
              index: 0,
              delta: { ...(first ? { role: "assistant" as const } : {}), ...(text !== undefined ? { content: text } : {}) },
              finish_reason: finish,
            },
          ],
        } satisfies ChatCompletionChunk)
      : ({
          id: base.id,
          object: "text_completion",
          created: base.created,
          model: base.model,
          choices: [{ index: 0, text: text ?? "", finish_reason: finish, logprobs: null }],
        } satisfies CompletionResponse);
}

/**
 * An access line per generation request (never its body), on standard output: it is the runtime's
 * ordinary output, shown as "out" by `forge deployments logs`; only failures go to standard error.
 */
function logAccess(req: IncomingMessage, res: ServerResponse): void {
  const began = performance.now();
  res.once("finish", () =>
    process.stdout.write(
      `runtime: ${req.method} ${(req.url ?? "").split("?")[0]} ${res.statusCode} ${Math.round(performance.now() - began)} ms\n`,
    ),
  );
}

function answerFailure(res: ServerResponse, err: unknown): void {
  const e = err instanceof OpenAiError ? err : new OpenAiError(500, "server_error", "internal", "the runtime failed to answer");
  if (!(err instanceof OpenAiError)) process.stderr.write(`runtime: request failed: ${(err as Error).message}\n`);
  if (res.headersSent) {
    // Mid-stream: the status is gone; end the stream with an error event.
    res.end(`data: ${JSON.stringify(e.body())}\n\n`);
    return;
  }
  // A 413 whose body is being dropped keeps the connection; one too large to drop closes it.
  json(res, e.status, e.body(), e.status === 413 && !res.req.readableFlowing);
}

const routes: Record<string, "GET" | "POST"> = {
  "/health": "GET",
  "/v1/models": "GET",
  "/v1/completions": "POST",
  "/v1/chat/completions": "POST",
  "/v1/embeddings": "POST",
};

/** A vector as OpenAI's base64 encoding: its little-endian float32s. */
function base64Floats(v: number[]): string {
  const bytes = Buffer.alloc(v.length * 4);
  for (const [i, x] of v.entries()) bytes.writeFloatLE(x, i * 4);
  return bytes.toString("base64");
}

function usage(r: Pick<GenerationResult, "promptTokens" | "completionTokens">): Usage {
  return { prompt_tokens: r.promptTokens, completion_tokens: r.completionTokens, total_tokens: r.promptTokens + r.completionTokens };
}

function json(res: ServerResponse, status: number, body: unknown, close = false): void {
  const data = JSON.stringify(body);
  res.writeHead(status, {
    "content-type": "application/json",
    "content-length": Buffer.byteLength(data),
    ...(close ? { connection: "close" } : {}),
  });
  res.end(data);
}

/** An oversized body up to this size is read and dropped while the 413 goes out; beyond it the connection is closed. */
const drainBytes = 16 * 1024 * 1024;

/**
 * Reads at most `limits.bodyBytes`, then parses JSON; either failure is the client's. An oversized
 * body is refused at once, from its declared length when it has one, and (up to `drainBytes`) read
 * and dropped meanwhile: closing the connection while the client still writes makes it see a
 * reset (EPIPE, "fetch failed") instead of the 413.
 */
async function readJson(req: IncomingMessage): Promise<unknown> {
  const declared = Number(req.headers["content-length"] ?? 0);
  const tooLarge = () => {
    if (declared <= drainBytes) req.resume();
    return new OpenAiError(413, "invalid_request_error", "request_too_large", `the body exceeds ${limits.bodyBytes} bytes`);
  };
  if (declared > limits.bodyBytes) throw tooLarge();
  const parts: Buffer[] = [];
  let size = 0;
  for await (const part of req as AsyncIterable<Buffer>) {
    size += part.length;
    if (size > limits.bodyBytes) throw tooLarge();
    parts.push(part);
  }
  try {
    return JSON.parse(Buffer.concat(parts).toString("utf8"));
  } catch {
    throw new OpenAiError(400, "invalid_request_error", "invalid_json", "the body is not valid JSON");
  }
}
