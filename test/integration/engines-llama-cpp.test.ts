// The llama.cpp engine for real: llama-server (built from node-llama-cpp's llama.cpp source against
// its prebuilt ggml) started by the supervisor on a generated tiny GGUF, answering the
// OpenAI-compatible API with real tokens, several sequences at once, reusing what it computed.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Supervisor, type Runtime } from "../../agent/engines/supervisor.js";
import { OpenAiClientError } from "../../agent/engines/openai-client.js";
import { writeTinyLlamaGguf } from "../../scripts/gguf.js";

const dir = mkdtempSync(join(tmpdir(), "mf-engines-"));
const modelPath = join(dir, "tiny.gguf");
const supervisor = new Supervisor({ registryPath: join(dir, "runtimes.json") });
const parallel = 4;
let runtime: Runtime;

beforeAll(async () => {
  await writeTinyLlamaGguf(modelPath);
  runtime = await supervisor.start("llama.cpp", { modelPath, params: { contextSize: 1024, threads: 1, parallel, embeddings: true } });
}, 180_000);

afterAll(async () => {
  await supervisor.stopAll();
  rmSync(dir, { recursive: true, force: true });
});

/** llama-server's view of its sequences: which are generating now. */
async function slots(): Promise<{ id: number; n_ctx: number; is_processing: boolean }[]> {
  return (await (await fetch(`${runtime.baseUrl}/slots`)).json()) as { id: number; n_ctx: number; is_processing: boolean }[];
}

describe("llama.cpp runtime", () => {
  it("is healthy on loopback, measured, and serves its model under the runtime's id", async () => {
    expect(runtime.baseUrl).toMatch(/^http:\/\/127\.0\.0\.1:\d+$/);
    expect(await supervisor.health(runtime.id)).toEqual({ state: "healthy" });
    expect(runtime.loadMs).toBeGreaterThan(0);
    expect(runtime.backend).toBe("cpu");
    const memory = await runtime.memory();
    expect(memory!.rssBytes).toBeGreaterThan(1024 * 1024);
    expect(memory!.peakRssBytes).toBeGreaterThanOrEqual(memory!.rssBytes);
    const models = await runtime.client.models();
    expect(models.data.map((m) => m.id)).toEqual([runtime.id]);
  });

  it("gives each of its parallel sequences the profile's whole context", async () => {
    const s = await slots();
    expect(s.map((x) => x.n_ctx)).toEqual(Array(parallel).fill(1024));
  });

  it("completes with real tokens, usage and timings; greedy is deterministic", async () => {
    const a = await runtime.client.completion("Hello, world", { max_tokens: 12, temperature: 0 });
    expect(a.object).toBe("text_completion");
    expect(a.usage!.completion_tokens).toBeGreaterThan(0);
    expect(a.usage!.completion_tokens).toBeLessThanOrEqual(12);
    expect(a.usage!.prompt_tokens).toBeGreaterThan(0);
    expect(a.usage!.total_tokens).toBe(a.usage!.prompt_tokens + a.usage!.completion_tokens);
    expect(a.timings!.predicted_n).toBe(a.usage!.completion_tokens);
    expect(a.choices[0]!.text.length).toBeGreaterThan(0);
    const b = await runtime.client.completion("Hello, world", { max_tokens: 12, temperature: 0 });
    expect(b.choices[0]!.text).toBe(a.choices[0]!.text);
  });

  it("streams several chunks, then usage; the streamed text is the whole answer's", async () => {
    const chunks = [];
    for await (const c of runtime.client.streamCompletion("Stream me", { max_tokens: 8, temperature: 0 })) chunks.push(c);
    const texts = chunks.flatMap((c) => c.choices.map((ch) => ch.text)).filter((t) => t.length > 0);
    expect(texts.length).toBeGreaterThan(1);
    const usage = chunks.filter((c) => c.usage !== undefined).at(-1)!.usage!;
    expect(usage.completion_tokens).toBeGreaterThan(1);
    const whole = await runtime.client.completion("Stream me", { max_tokens: 8, temperature: 0 });
    expect(texts.join("")).toBe(whole.choices[0]!.text);
  });

  it("answers chat completions, whole and streamed", async () => {
    const messages = [
      { role: "system" as const, content: "You are terse." },
      { role: "user" as const, content: "Say something." },
    ];
    const chat = await runtime.client.chat(messages, { max_tokens: 8, temperature: 0 });
    expect(chat.object).toBe("chat.completion");
    expect(chat.choices[0]!.message.role).toBe("assistant");
    expect(chat.usage.completion_tokens).toBeGreaterThan(0);
    const chunks = [];
    for await (const c of runtime.client.streamChat(messages, { max_tokens: 8, temperature: 0 })) chunks.push(c);
    expect(chunks[0]!.choices[0]!.delta.role).toBe("assistant");
    expect(chunks.filter((c) => c.usage !== undefined).at(-1)!.usage!.completion_tokens).toBe(chat.usage.completion_tokens);
    expect(chunks.map((c) => c.choices[0]?.delta.content ?? "").join("")).toBe(chat.choices[0]!.message.content);
  });

  it("embeds: a vector per input, as floats or base64 float32s", async () => {
    const embed = async (encoding: string) => {
      const bytes = await runtime.client.postRaw("/v1/embeddings", JSON.stringify({ input: ["a", "b c"], encoding_format: encoding }));
      return JSON.parse(bytes.toString("utf8")) as {
        object: string;
        data: { index: number; embedding: number[] | string }[];
        usage: Record<string, number>;
      };
    };
    const floats = await embed("float");
    expect(floats.object).toBe("list");
    expect(floats.data.map((d) => d.index)).toEqual([0, 1]);
    const vectors = floats.data.map((d) => d.embedding as number[]);
    // The tiny model's embedding length (scripts/gguf.ts).
    expect(vectors.map((v) => v.length)).toEqual([64, 64]);
    expect(floats.usage.prompt_tokens).toBeGreaterThan(0);
    const decoded = (await embed("base64")).data.map((d) => {
      const bytes = Buffer.from(d.embedding as string, "base64");
      return Array.from({ length: bytes.length / 4 }, (_, i) => bytes.readFloatLE(i * 4));
    });
    expect(decoded.map((v) => v.map((x) => x.toFixed(5)))).toEqual(vectors.map((v) => v.map((x) => x.toFixed(5))));
  });

  it("generates for its parallel sequences at once, not one after another", async () => {
    // Streams started together: with sequences decoded side by side, each has its first token
    // before any of them ends (one after another, the first would end before the second began).
    // The end-of-sequence token (2) is banned so that none ends early.
    const timed = async (i: number) => {
      let first = 0;
      const params = { max_tokens: 800, temperature: 1, seed: i, logit_bias: { "2": -100 } };
      for await (const c of runtime.client.streamCompletion(`busy ${i}`, params)) {
        if (first === 0 && c.choices.some((ch) => ch.text.length > 0)) first = performance.now();
      }
      return { first, end: performance.now() };
    };
    const runs = await Promise.all(Array.from({ length: parallel }, (_, i) => timed(i)));
    expect(runs.every((r) => r.first > 0)).toBe(true);
    expect(Math.max(...runs.map((r) => r.first))).toBeLessThan(Math.min(...runs.map((r) => r.end)));
  });

  it("reuses a prompt's prefix: a request sharing it evaluates only the rest", async () => {
    const prefix = Array.from({ length: 16 }, (_, i) => `line ${i} of a shared system prompt`).join("\n");
    const first = await runtime.client.completion(`${prefix}\nfirst question`, { max_tokens: 2, temperature: 0 });
    const second = await runtime.client.completion(`${prefix}\nsecond question`, { max_tokens: 2, temperature: 0 });
    const cached = second.usage!.prompt_tokens_details!.cached_tokens;
    expect(cached).toBeGreaterThan(first.usage!.prompt_tokens * 0.9);
    expect(second.timings!.prompt_n).toBe(second.usage!.prompt_tokens - cached);
  });

  it("refuses a prompt longer than a sequence's context in OpenAI's error shape", async () => {
    const err = await runtime.client.completion("x ".repeat(1500), { max_tokens: 1 }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(OpenAiClientError);
    expect((err as OpenAiClientError).status).toBe(400);
  });
});
