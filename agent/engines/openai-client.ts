// The agent's one client for every engine's OpenAI-compatible API (the llama.cpp worker and any
// external server alike). Bounded: every call has a deadline and a stream's events a size limit.
import { createParser } from "eventsource-parser";
import type {
  ChatCompletionChunk,
  ChatCompletionResponse,
  ChatMessage,
  CompletionResponse,
  ErrorBody,
  ModelList,
} from "./openai-protocol.js";
import type { Cancel } from "../../common/cancel.js";
import { RuntimeHttp } from "./runtime-http.js";

export interface GenerationParams {
  model?: string;
  max_tokens?: number;
  temperature?: number;
  seed?: number;
  stop?: string[];
  /** Token id to the value added to its logit (-100 bans it). */
  logit_bias?: Record<string, number>;
}

/** A refusal or failure from the engine, with OpenAI's error type and code when it gave them. */
export class OpenAiClientError extends Error {
  constructor(
    readonly status: number,
    readonly type: string | undefined,
    readonly code: string | undefined,
    message: string,
  ) {
    super(message);
    this.name = "OpenAiClientError";
  }
}

const maxEventBytes = 1024 * 1024;

/**
 * The connection was reset or closed before any answer: the socket's own failure (which fetch
 * wraps in a TypeError), not an HTTP one.
 */
export function closedBeforeAnswer(err: unknown): boolean {
  const failure = err instanceof TypeError ? err.cause : err instanceof OpenAiClientError ? undefined : err;
  const code = (failure as { code?: unknown } | undefined)?.code ?? "";
  return code === "ECONNRESET" || code === "EPIPE" || code === "UND_ERR_SOCKET";
}

export class OpenAiClient {
  /** The relay's path: a request per invoke, where fetch's own cost showed. */
  private readonly raw: RuntimeHttp;

  constructor(
    readonly baseUrl: string,
    private readonly timeoutMs = 120_000,
  ) {
    this.raw = new RuntimeHttp(new URL(baseUrl));
  }

  /** True when GET `path` answers 200 within `timeoutMs`. */
  async healthy(path = "/health", timeoutMs = 5_000): Promise<boolean> {
    try {
      const res = await fetch(new URL(path, this.baseUrl), { signal: AbortSignal.timeout(timeoutMs) });
      await res.body?.cancel();
      return res.status === 200;
    } catch {
      return false;
    }
  }

  async models(): Promise<ModelList> {
    return (await this.json("GET", "/v1/models")) as ModelList;
  }

  async completion(prompt: string, params: GenerationParams = {}): Promise<CompletionResponse> {
    return (await this.json("POST", "/v1/completions", { ...params, prompt })) as CompletionResponse;
  }

  async chat(messages: ChatMessage[], params: GenerationParams = {}): Promise<ChatCompletionResponse> {
    return (await this.json("POST", "/v1/chat/completions", { ...params, messages })) as ChatCompletionResponse;
  }

  /** Streamed completion chunks; the stream's usage arrives in its last chunk. */
  streamCompletion(prompt: string, params: GenerationParams = {}): AsyncGenerator<CompletionResponse> {
    return this.events("/v1/completions", { ...params, prompt }) as AsyncGenerator<CompletionResponse>;
  }

  streamChat(messages: ChatMessage[], params: GenerationParams = {}): AsyncGenerator<ChatCompletionChunk> {
    return this.events("/v1/chat/completions", { ...params, messages }) as AsyncGenerator<ChatCompletionChunk>;
  }

  /** POSTs a caller's JSON body as it is and returns the answer's bytes (the relay's unary path). */
  postRaw(path: string, body: string, signal?: AbortSignal | Cancel, timeoutMs?: number): Promise<Buffer> {
    return this.send<Buffer>(path, body, signal, timeoutMs, (_status, resolve) => {
      const chunks: Buffer[] = [];
      return {
        data: (chunk) => chunks.push(chunk),
        end: () => resolve(chunks.length === 1 ? chunks[0]! : Buffer.concat(chunks)),
      };
    });
  }

  /**
   * POSTs a caller's JSON body (with "stream": true) and hands each event's data to `onData` as
   * its bytes are read, with no promise or generator between (a relayed stream's every chunk
   * crosses here); resolves at [DONE], and the rest of the body is read quietly so that its
   * connection is kept. A throw from `onData` ends the stream with that error.
   */
  streamRaw(path: string, body: string, onData: (data: string) => void, signal?: AbortSignal | Cancel, timeoutMs?: number): Promise<void> {
    return this.send<void>(path, body, signal, timeoutMs, (status, resolve, reject) => {
      const events = new EventSplitter(status);
      let over = false;
      const take = (chunk: Buffer | undefined) => {
        if (over) return;
        for (const data of events.feed(chunk)) {
          if (data === "[DONE]") {
            over = true;
            return resolve();
          }
          onData(data);
        }
        if (chunk === undefined) reject(events.unfinished());
      };
      return { data: take, end: () => take(undefined) };
    });
  }

  /**
   * Sends the request and settles with what `read` makes of a 2xx answer; any other status is a
   * refusal. Sent once more, on a connection of its own, when the first was cut before any
   * answer: as in request() below, and not on another kept-alive connection, since after an idle
   * spell the runtime closes them all, and under load the next one may be closing too
   * (bench/openai.ts once failed a request so).
   */
  private send<T>(
    path: string,
    body: string,
    signal: AbortSignal | Cancel | undefined,
    timeoutMs: number = this.timeoutMs,
    read: (status: number, resolve: (value: T) => void, reject: (err: unknown) => void) => BodyReader,
  ): Promise<T> {
    const post = { path, body, signal, timeoutMs: Math.min(timeoutMs, this.timeoutMs) };
    return new Promise<T>((resolve, reject) => {
      const attempt = (fresh: boolean) => {
        let reader: BodyReader | undefined;
        let refused: Refused | undefined;
        this.raw.post(
          { ...post, fresh },
          {
            head: (status) => {
              if (status >= 200 && status < 300) reader = read(status, resolve, reject);
              else reader = refused = new Refused(status);
            },
            data: (chunk) => reader!.data(chunk),
            end: () => {
              try {
                reader!.end();
                if (refused !== undefined) reject(refused.error());
              } catch (err) {
                reject(err);
              }
            },
            fail: (err) => {
              // An answer cut while refusing is still the refusal, in what words came.
              if (refused !== undefined) reject(refused.error());
              else if (reader === undefined && !fresh && closedBeforeAnswer(err) && !signal?.aborted) attempt(true);
              else reject(err);
            },
          },
        );
      };
      attempt(false);
    });
  }

  private async request(method: string, path: string, body?: unknown, signal?: AbortSignal): Promise<Response> {
    const timeout = AbortSignal.timeout(this.timeoutMs);
    const init: RequestInit = {
      method,
      headers: body === undefined ? {} : { "content-type": "application/json" },
      body: body === undefined ? undefined : typeof body === "string" ? body : JSON.stringify(body),
      signal: signal === undefined ? timeout : AbortSignal.any([timeout, signal]),
    };
    let res: Response;
    try {
      res = await fetch(new URL(path, this.baseUrl), init);
    } catch (err) {
      // A kept-alive connection the runtime closed as idle just as this request went out on it (a
      // runtime that stalled wakes to its timers before its reads). Nothing was answered and a
      // generation has no side effects, so it is sent once more, on a new connection.
      if (!closedBeforeAnswer(err) || init.signal?.aborted) throw err;
      res = await fetch(new URL(path, this.baseUrl), init);
    }
    if (res.ok) return res;
    throw refusal(res.status, await res.text().catch(() => ""));
  }

  private async json(method: string, path: string, body?: unknown): Promise<unknown> {
    return (await this.request(method, path, body)).json();
  }

  private async *events(path: string, body: Record<string, unknown>): AsyncGenerator<unknown> {
    const res = await this.request("POST", path, { ...body, stream: true, stream_options: { include_usage: true } });
    for await (const data of eventData(res.status, res.body as unknown as AsyncIterable<Uint8Array>)) {
      const parsed = JSON.parse(data) as { error?: ErrorBody["error"] };
      if (parsed.error) throw new OpenAiClientError(res.status, parsed.error.type, parsed.error.code ?? undefined, parsed.error.message);
      yield parsed;
    }
  }
}

/** An engine's HTTP refusal, in its own words when it gave them in OpenAI's shape. */
function refusal(status: number, text: string): OpenAiClientError {
  let error: Partial<ErrorBody["error"]> = {};
  try {
    error = (JSON.parse(text) as ErrorBody).error ?? {};
  } catch {
    /* not OpenAI's shape: the status says enough */
  }
  return new OpenAiClientError(status, error.type, error.code ?? undefined, error.message ?? `HTTP ${status}`);
}

interface BodyReader {
  data(chunk: Buffer): void;
  end(): void;
}

/** Most of a refusal's body kept for its message: a runtime's error is a line or two of JSON. */
const maxRefusalBytes = 64 * 1024;

/** A non-2xx answer's body, read for the runtime's own words. */
class Refused implements BodyReader {
  private readonly chunks: Buffer[] = [];
  private bytes = 0;

  constructor(private readonly status: number) {}

  data(chunk: Buffer): void {
    if (this.bytes >= maxRefusalBytes) return;
    this.chunks.push(chunk);
    this.bytes += chunk.length;
  }

  end(): void {}

  error(): OpenAiClientError {
    return refusal(this.status, Buffer.concat(this.chunks).subarray(0, maxRefusalBytes).toString("utf8"));
  }
}

/**
 * Server-sent events' data as the bytes come: the framing is eventsource-parser's, as the spec
 * has it (LF, CRLF or CR line ends, multi-line data, comments), so a proxy in front of an upstream
 * may frame events its own way. An event over the size limit is refused.
 */
class EventSplitter {
  private readonly decoder = new TextDecoder();
  private readonly parsed: string[] = [];
  private failure: Error | undefined;
  private readonly parser;

  constructor(private readonly status: number) {
    this.parser = createParser({
      maxBufferSize: maxEventBytes,
      onEvent: (event) => {
        if (event.data !== "") this.parsed.push(event.data);
      },
      onError: (err) => {
        this.failure ??=
          err.type === "max-buffer-size-exceeded"
            ? new OpenAiClientError(status, undefined, undefined, "a stream event exceeds the size limit")
            : undefined;
      },
    });
  }

  /** The data of the events `chunk` completes, "[DONE]" included; undefined: the body ended. */
  feed(chunk: Uint8Array | undefined): string[] {
    // At the end, a CR the parser holds (it cannot yet tell a lone CR from the start of a CRLF)
    // still ends its line: an LF completes it, and adds no event where there was none.
    this.parser.feed(chunk === undefined ? "\n" : this.decoder.decode(chunk, { stream: true }));
    if (this.failure !== undefined) throw this.failure;
    return this.parsed.length === 0 ? noEvents : this.parsed.splice(0);
  }

  /** The error of a body that ended before [DONE]. */
  unfinished(): OpenAiClientError {
    return new OpenAiClientError(this.status, undefined, undefined, "the stream ended without [DONE]");
  }
}

const noEvents: string[] = [];

/** The data of each server-sent event of `body`, until [DONE]. */
async function* eventData(status: number, body: AsyncIterable<Uint8Array>): AsyncGenerator<string> {
  const events = new EventSplitter(status);
  const chunks = body[Symbol.asyncIterator]();
  for (let done = false; !done; ) {
    const next = await chunks.next();
    done = next.done === true;
    for (const data of events.feed(done ? undefined : next.value)) {
      if (data === "[DONE]") return;
      yield data;
    }
  }
  throw events.unfinished();
}
