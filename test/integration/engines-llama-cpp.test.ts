// The llama.cpp engine for real: a generated tiny GGUF loaded by node-llama-cpp in a worker process
// the supervisor starts, answering the OpenAI-compatible API with real tokens.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { mkdtempSync, rmSync } from "node:fs";
import { request } from "node:http";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Supervisor, type Runtime } from "../../agent/engines/supervisor.js";
import { OpenAiClientError } from "../../agent/engines/openai-client.js";
import { writeTinyLlamaGguf } from "../../scripts/gguf.js";

const dir = mkdtempSync(join(tmpdir(), "mf-engines-"));
const modelPath = join(dir, "tiny.gguf");
const supervisor = new Supervisor({ registryPath: join(dir, "runtimes.json") });
let runtime: Runtime;

beforeAll(async () => {
  await writeTinyLlamaGguf(modelPath);
  runtime = await supervisor.start("llama.cpp", { modelPath, params: { contextSize: 1024, threads: 1 } });
}, 180_000);

afterAll(async () => {
  await supervisor.stopAll();
  rmSync(dir, { recursive: true, force: true });
});

describe("llama.cpp runtime", () => {
  it("is healthy on loopback, measured, and lists its model", async () => {
    expect(runtime.baseUrl).toMatch(/^http:\/\/127\.0\.0\.1:\d+$/);
    expect(await supervisor.health(runtime.id)).toEqual({ state: "healthy" });
    expect(runtime.loadMs).toBeGreaterThan(0);
    expect(runtime.modelLoadMs).toBeGreaterThan(0);
    const memory = await runtime.memory();
    expect(memory!.rssBytes).toBeGreaterThan(10 * 1024 * 1024);
    expect(memory!.peakRssBytes).toBeGreaterThanOrEqual(memory!.rssBytes);
    const models = await runtime.client.models();
    expect(models.data.map((m) => m.id)).toEqual([runtime.id]);
  });

  it("completes with real tokens, usage and timings; greedy is deterministic", async () => {
    const a = await runtime.client.completion("Hello, world", { max_tokens: 12, temperature: 0 });
    expect(a.object).toBe("text_completion");
    expect(a.usage!.completion_tokens).toBeGreaterThan(0);
    expect(a.usage!.completion_tokens).toBeLessThanOrEqual(12);
    expect(a.usage!.prompt_tokens).toBeGreaterThan(0);
    expect(a.usage!.total_tokens).toBe(a.usage!.prompt_tokens + a.usage!.completion_tokens);
    expect(a.timings!.prompt_ms).toBeGreaterThan(0);
    expect(a.choices[0]!.text.length).toBeGreaterThan(0);
    const b = await runtime.client.completion("Hello, world", { max_tokens: 12, temperature: 0 });
    expect(b.choices[0]!.text).toBe(a.choices[0]!.text);
  });

  it("streams several chunks, then usage, then [DONE]", async () => {
    const chunks = [];
    for await (const c of runtime.client.streamCompletion("Stream me", { max_tokens: 8, temperature: 0 })) chunks.push(c);
    const texts = chunks.flatMap((c) => c.choices.map((ch) => ch.text)).filter((t) => t.length > 0);
    expect(texts.length).toBeGreaterThan(1);
    const finish = chunks.flatMap((c) => c.choices).find((ch) => ch.finish_reason !== null);
    expect(finish?.finish_reason).toMatch(/^(stop|length)$/);
    const usage = chunks.at(-1)!.usage!;
    expect(usage.completion_tokens).toBeGreaterThan(1);
    // The streamed text is the same as the whole answer.
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
    expect(chunks.at(-1)!.usage!.completion_tokens).toBe(chat.usage.completion_tokens);
    expect(chunks.map((c) => c.choices[0]?.delta.content ?? "").join("")).toBe(chat.choices[0]!.message.content);
  });

  it("embeds with its embedding context: a vector per input, as floats or base64 float32s", async () => {
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
    expect(floats.usage.total_tokens).toBe(floats.usage.prompt_tokens);
    const decoded = (await embed("base64")).data.map((d) => {
      const bytes = Buffer.from(d.embedding as string, "base64");
      return Array.from({ length: bytes.length / 4 }, (_, i) => bytes.readFloatLE(i * 4));
    });
    expect(decoded).toEqual(vectors);
  });

  it("refuses bad requests in OpenAI's error shape", async () => {
    const post = (path: string, body: string) =>
      fetch(`${runtime.baseUrl}${path}`, { method: "POST", headers: { "content-type": "application/json" }, body });
    const cases: [string, string, number, string][] = [
      ["/v1/completions", "{not json", 400, "invalid_json"],
      ["/v1/completions", JSON.stringify({ prompt: 1 }), 400, "invalid_value"],
      ["/v1/completions", JSON.stringify({ prompt: "x", max_tokens: 100_000 }), 400, "invalid_value"],
      ["/v1/completions", JSON.stringify({ prompt: "x", max_tokens: 1024 }), 400, "context_length_exceeded"],
      ["/v1/completions", JSON.stringify({ prompt: "x", model: "other" }), 404, "model_not_found"],
      ["/v1/chat/completions", JSON.stringify({ messages: [{ role: "tool", content: "x" }] }), 400, "invalid_value"],
      ["/v1/nothing", "{}", 404, "not_found"],
      ["/v1/embeddings", JSON.stringify({ input: [] }), 400, "invalid_value"],
      ["/v1/embeddings", JSON.stringify({ input: "x", encoding_format: "int8" }), 400, "invalid_value"],
      ["/v1/embeddings", JSON.stringify({ input: ["a", "ab".repeat(1500)] }), 400, "context_length_exceeded"],
      ["/v1/embeddings", JSON.stringify({ input: "x", model: "other" }), 404, "model_not_found"],
    ];
    for (const [path, body, status, code] of cases) {
      const res = await post(path, body);
      expect({ path, status: res.status }).toEqual({ path, status });
      const error = ((await res.json()) as { error: { code: string; type: string; message: string } }).error;
      expect(error.code).toBe(code);
      expect(error.message.length).toBeGreaterThan(0);
    }
    // An oversized body is refused from its declared length, before it is read, and the
    // connection closed: sent with fetch, the upload raced that close (EPIPE, "fetch failed").
    // Declare 2 MiB and send nothing until the answer comes.
    const oversized = await new Promise<{ status: number | undefined; body: string }>((resolve, reject) => {
      const req = request(`${runtime.baseUrl}/v1/completions`, {
        method: "POST",
        headers: { "content-type": "application/json", "content-length": 2 * 1024 * 1024 },
      });
      req.on("response", (res) => {
        let body = "";
        res.setEncoding("utf8");
        res.on("data", (c: string) => (body += c));
        res.on("end", () => {
          resolve({ status: res.statusCode, body });
          req.destroy();
        });
      });
      req.on("error", reject);
      req.flushHeaders();
    });
    expect(oversized.status).toBe(413);
    expect((JSON.parse(oversized.body) as { error: { code: string } }).error.code).toBe("request_too_large");
    await expect(runtime.client.completion("x", { model: "other" })).rejects.toMatchObject({ status: 404, code: "model_not_found" });
    await expect(runtime.client.completion("x", { model: "other" })).rejects.toBeInstanceOf(OpenAiClientError);
  });

  it("generates for one request at a time: a concurrent one gets 429", async () => {
    const long = runtime.client.completion("busy", { max_tokens: 900, temperature: 0 });
    // Wait until the first one holds the runtime, then ask again.
    let second: Response | undefined;
    const deadline = Date.now() + 60_000;
    while (Date.now() < deadline) {
      second = await fetch(`${runtime.baseUrl}/v1/completions`, {
        method: "POST",
        body: JSON.stringify({ prompt: "second", max_tokens: 1 }),
      });
      if (second.status === 429) break;
      await second.body?.cancel();
    }
    expect(second!.status).toBe(429);
    expect(((await second!.json()) as { error: { type: string } }).error.type).toBe("rate_limit_error");
    const first = await long;
    expect(first.usage!.completion_tokens).toBeGreaterThan(0);
  });
});
