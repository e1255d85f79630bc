// The built-in engine through the whole serving path, as a client sees it: the official `openai`
// SDK at the control plane's OpenAI API, a real agent process, and llama-server generating for 8
// sequences of the tiny GGUF at once. Requests are generated side by side and a late one joins
// mid-generation; a chat's next turn reuses what the last one computed and usage says so; answers
// held to a JSON schema or to a tool's parameters always fit them; every sampling field changes
// the answer or is refused; and a cancelled stream stops its own generation and no other.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import OpenAI from "openai";
import { Ajv } from "ajv";
import { Agent, fetch as undiciFetch } from "undici";
import { EngineKind } from "../../gen/proto/modelforge/jobs/v1/jobs_pb.js";
import { UsageGrouping } from "../../gen/proto/modelforge/admin/v1/admin_pb.js";
import { writeTinyLlamaGguf } from "../../scripts/gguf.js";
import { startTestServer, type TestServer } from "../support/server.js";
import { enrollTestNode, eventually, type TestNode } from "../support/node.js";
import type { AgentProcess } from "../support/process.js";
import { deployReady, spawnServingAgent, storeArtifact } from "../support/serving.js";
import { scrape } from "../support/prometheus.js";

const parallel = 8;
/** The tiny model's end-of-sequence token (scripts/gguf.ts), banned where a stream must run its length. */
const noEnd = { "2": -100 };

let ts: TestServer;
let root: string;
let node: TestNode;
let agent: AgentProcess;
let openai: OpenAI;
let dispatcher: Agent;
const ajv = new Ajv({ strict: true });

beforeAll(async () => {
  root = mkdtempSync(join(tmpdir(), "mf-engine-serving-"));
  const path = join(root, "tiny.gguf");
  const model = { path, ...(await writeTinyLlamaGguf(path, { contextLength: 2048 })) };
  ts = await startTestServer({
    MODELFORGE_HEARTBEAT_INTERVAL: "200ms",
    MODELFORGE_APPROVED_ROOTS: root,
    MODELFORGE_USAGE_FLUSH: "200ms",
    MODELFORGE_METRICS_ADDRESS: "127.0.0.1:0",
  });
  dispatcher = new Agent({ connect: { ca: ts.caPem }, connections: 64 });
  node = await enrollTestNode(ts, "engine");
  await ts.admin.createRuntimeProfile({ name: "tiny-cpu", engine: EngineKind.LLAMA_CPP, contextSize: 2048, threads: 1, parallel });
  agent = await spawnServingAgent(ts.admin, node, root);
  const at = { repository: "acme/tiny", commit: "e".repeat(40) };
  await storeArtifact(ts.admin, { ...at, path: "tiny.gguf" }, model.path, model.sha256);
  await deployReady(ts.admin, { name: "tiny", nodeId: node.nodeId, runtimeProfile: "tiny-cpu", ...at, targetRoot: root, maxInFlight: 64 });
  const { secret } = await ts.admin.createServiceKey({ name: "svc", deployments: ["tiny"] });
  openai = new OpenAI({
    apiKey: secret,
    baseURL: `${ts.url}/v1`,
    maxRetries: 0,
    fetch: (url, init) => undiciFetch(url as string, { ...(init as object), dispatcher }) as unknown as Promise<Response>,
  });
}, 240_000);

afterAll(async () => {
  await dispatcher?.close();
  await agent?.stop();
  await ts?.stop();
  if (root) rmSync(root, { recursive: true, force: true });
});

interface Timed {
  /** When each token chunk arrived (performance.now()), in order. */
  tokens: number[];
  finish: string | null;
  completionTokens: number | undefined;
}

/** One streamed completion, each token chunk's arrival time kept; `stop` aborts it once it returns true. */
async function timedStream(prompt: string, maxTokens: number, stop?: (t: Timed) => boolean): Promise<Timed> {
  const out: Timed = { tokens: [], finish: null, completionTokens: undefined };
  const stream = await openai.completions.create({
    model: "tiny",
    prompt,
    max_tokens: maxTokens,
    temperature: 1,
    logit_bias: noEnd,
    stream: true,
    stream_options: { include_usage: true },
  });
  try {
    for await (const chunk of stream) {
      for (const choice of chunk.choices) {
        if (choice.text.length > 0) out.tokens.push(performance.now());
        if (choice.finish_reason) out.finish = choice.finish_reason;
      }
      if (chunk.usage) out.completionTokens = chunk.usage.completion_tokens;
      if (stop?.(out)) {
        stream.controller.abort();
        break;
      }
    }
  } catch (err) {
    if (!stream.controller.signal.aborted) throw err;
  }
  return out;
}

const first = (t: Timed) => t.tokens[0]!;
const last = (t: Timed) => t.tokens.at(-1)!;

describe("the built-in engine, serving", () => {
  it(`keeps ${parallel} requests in flight at once on one replica, their tokens interleaved`, async () => {
    const runs = await Promise.all(Array.from({ length: parallel }, (_, i) => timedStream(`together ${i}`, 1500)));
    for (const r of runs) {
      expect(r.finish).toBe("length");
      expect(r.completionTokens).toBe(1500);
    }
    // Every one had its first token before any had its last: all were generating at once.
    expect(Math.max(...runs.map(first))).toBeLessThan(Math.min(...runs.map(last)));
    // Interleaved, not one after another: in arrival order, the stream changes at most steps.
    const order = runs.flatMap((r, i) => r.tokens.map((at) => ({ at, i }))).sort((a, b) => a.at - b.at);
    const switches = order.filter((t, k) => k > 0 && t.i !== order[k - 1]!.i).length;
    expect(switches).toBeGreaterThan(parallel * 20);
  });

  it("starts a request that arrives mid-generation before the others end", async () => {
    let joined: Promise<Timed> | undefined;
    const long = await timedStream("the long one", 1500, (t) => {
      // Once the long one is well under way, the late one comes.
      if (t.tokens.length === 50) joined = timedStream("the late one", 10);
      return false;
    });
    const late = await joined!;
    expect(late.finish).toBe("length");
    expect(last(late)).toBeLessThan(last(long));
  });

  it("reuses a chat's earlier turns: the next turn reports them cached and evaluates only what is new", async () => {
    const system = { role: "system" as const, content: Array.from({ length: 12 }, (_, i) => `Rule ${i}: answer briefly.`).join(" ") };
    const question = { role: "user" as const, content: "What is a sequence?" };
    const turn1 = await openai.chat.completions.create({ model: "tiny", messages: [system, question], max_tokens: 8, temperature: 0 });
    const answer = { role: "assistant" as const, content: turn1.choices[0]!.message.content ?? "" };
    const followUp = { role: "user" as const, content: "And a slot?" };
    const turn2 = await openai.chat.completions.create({
      model: "tiny",
      messages: [system, question, answer, followUp],
      max_tokens: 8,
      temperature: 0,
    });
    const cached = turn2.usage!.prompt_tokens_details!.cached_tokens!;
    // All of the first turn's prompt was kept (less the one token llama.cpp evaluates again).
    expect(cached).toBeGreaterThanOrEqual(turn1.usage!.prompt_tokens - 1);
    // What was evaluated is what the second turn added (the answer and the new question, in the
    // template), not the first turn again.
    const evaluated = turn2.usage!.prompt_tokens - cached;
    expect(evaluated).toBeLessThanOrEqual(turn2.usage!.prompt_tokens - turn1.usage!.prompt_tokens + 1);
    // Accounting keeps them apart: the Prometheus counter and the key's usage.
    await eventually(
      async () => {
        const m = await scrape(ts.server.metricsUrl!);
        return (m.value("modelforge_cached_prompt_tokens_total", { deployment: "tiny" }) ?? 0) >= cached;
      },
      30_000,
      "the cached prompt tokens counted",
    );
    await eventually(
      async () => {
        const usage = await ts.admin.getUsage({ by: UsageGrouping.DEPLOYMENT });
        return (usage.rows.find((r) => r.deploymentName === "tiny")?.cachedPromptTokens ?? 0n) >= BigInt(cached);
      },
      30_000,
      "the cached prompt tokens in the key's usage",
    );
  });

  const person = {
    type: "object",
    properties: {
      name: { type: "string", minLength: 1, maxLength: 12 },
      age: { type: "integer", minimum: 0, maximum: 120 },
      tags: { type: "array", items: { enum: ["red", "green", "blue"] }, maxItems: 3 },
      active: { type: "boolean" },
    },
    required: ["name", "age", "tags", "active"],
    additionalProperties: false,
  };

  it("holds every answer to a json_schema: it parses and validates, seed after seed", async () => {
    const validate = ajv.compile(person);
    for (let seed = 1; seed <= 12; seed++) {
      const chat = await openai.chat.completions.create({
        model: "tiny",
        messages: [{ role: "user", content: "A person, please." }],
        max_tokens: 400,
        temperature: 1,
        seed,
        response_format: { type: "json_schema", json_schema: { name: "person", schema: person } },
      });
      const content = chat.choices[0]!.message.content!;
      expect({ seed, finish: chat.choices[0]!.finish_reason }).toEqual({ seed, finish: "stop" });
      const value: unknown = JSON.parse(content);
      expect({ seed, valid: validate(value), errors: validate.errors }).toEqual({ seed, valid: true, errors: null });
    }
  });

  it("refuses a schema keyword the grammar cannot hold an answer to, naming it", async () => {
    const schema = { type: "object", properties: { n: { type: "number", multipleOf: 3 } } };
    const err = await openai.chat.completions
      .create({
        model: "tiny",
        messages: [{ role: "user", content: "x" }],
        response_format: { type: "json_schema", json_schema: { name: "n", schema } },
      })
      .catch((e: unknown) => e);
    expect(err).toBeInstanceOf(OpenAI.BadRequestError);
    expect((err as Error).message).toContain("response_format.json_schema.schema.properties.n.multipleOf");
  });

  const weather = {
    type: "function" as const,
    function: {
      name: "get_weather",
      description: "The weather in a city for the next days.",
      parameters: {
        type: "object",
        properties: { city: { type: "string", minLength: 1, maxLength: 16 }, days: { type: "integer", minimum: 1, maximum: 7 } },
        required: ["city", "days"],
        additionalProperties: false,
      },
    },
  };
  const time = {
    type: "function" as const,
    function: { name: "get_time", parameters: { type: "object", properties: {}, additionalProperties: false } },
  };

  it("answers a required tool call with tool_calls whose arguments fit the function, whole and streamed", async () => {
    const validate = ajv.compile(weather.function.parameters);
    for (let seed = 1; seed <= 6; seed++) {
      const chat = await openai.chat.completions.create({
        model: "tiny",
        messages: [{ role: "user", content: "Weather in Oslo?" }],
        tools: [weather],
        tool_choice: { type: "function", function: { name: "get_weather" } },
        max_tokens: 200,
        temperature: 1,
        seed,
      });
      const choice = chat.choices[0]!;
      expect(choice.finish_reason).toBe("tool_calls");
      expect(choice.message.content).toBeNull();
      const call = choice.message.tool_calls![0]!;
      expect(call).toMatchObject({ id: expect.stringMatching(/^call_/), type: "function", function: { name: "get_weather" } });
      const args: unknown = JSON.parse((call as { function: { arguments: string } }).function.arguments);
      expect({ seed, valid: validate(args), errors: validate.errors }).toEqual({ seed, valid: true, errors: null });
    }
    // tool_choice "required" among two tools, streamed: one delta.tool_calls, then the finish.
    const stream = await openai.chat.completions.create({
      model: "tiny",
      messages: [{ role: "user", content: "Weather or time?" }],
      tools: [weather, time],
      tool_choice: "required",
      max_tokens: 200,
      temperature: 1,
      seed: 7,
      stream: true,
    });
    const deltas = [];
    for await (const chunk of stream) deltas.push(...chunk.choices);
    const calls = deltas.flatMap((d) => d.delta.tool_calls ?? []);
    expect(calls).toHaveLength(1);
    expect(["get_weather", "get_time"]).toContain(calls[0]!.function!.name);
    expect(() => JSON.parse(calls[0]!.function!.arguments!)).not.toThrow();
    expect(deltas.at(-1)!.finish_reason).toBe("tool_calls");
    expect(deltas.every((d) => d.delta.content === undefined || d.delta.content === null || d.delta.content === "")).toBe(true);
  });

  it("carries a tool's result back into the conversation", async () => {
    const chat = await openai.chat.completions.create({
      model: "tiny",
      messages: [
        { role: "user", content: "Weather in Oslo?" },
        {
          role: "assistant",
          content: null,
          tool_calls: [{ id: "call_1", type: "function", function: { name: "get_weather", arguments: '{"city":"Oslo","days":1}' } }],
        },
        { role: "tool", tool_call_id: "call_1", content: [{ type: "text", text: "sunny, 21 C" }] },
      ],
      tools: [weather],
      tool_choice: "none",
      max_tokens: 6,
      temperature: 0,
    });
    expect(chat.choices[0]!.message.content!.length).toBeGreaterThan(0);
    expect(chat.choices[0]!.message.tool_calls ?? []).toEqual([]);
  });

  it("changes the answer for every sampling field, or refuses the field by name", async () => {
    const base = { model: "tiny", prompt: "Once upon a time", max_tokens: 48, temperature: 1, seed: 42 };
    const text = async (extra: object) => (await openai.completions.create({ ...base, ...extra } as never)).choices[0]!.text;
    const baseline = await text({});
    expect(await text({})).toBe(baseline);
    const variants: [string, object][] = [
      ["temperature", { temperature: 0 }],
      ["top_p", { top_p: 0.05 }],
      ["top_k", { top_k: 1 }],
      ["min_p", { min_p: 0.5 }],
      ["presence_penalty", { presence_penalty: 2 }],
      ["frequency_penalty", { frequency_penalty: 2 }],
      ["repeat_penalty", { repeat_penalty: 2 }],
      ["seed", { seed: 43 }],
      // Token 40 of the tiny vocabulary: every token it writes.
      ["logit_bias", { logit_bias: { "40": 100 } }],
      ["stop", { stop: [baseline.slice(4, 6)] }],
    ];
    for (const [field, extra] of variants) expect({ field, changed: (await text(extra)) !== baseline }).toEqual({ field, changed: true });
    expect(await text({ stop: [baseline.slice(4, 6)] })).toBe(baseline.slice(0, baseline.indexOf(baseline.slice(4, 6))));
    for (const field of ["mirostat", "typical_p", "dry_multiplier", "grammar"]) {
      const err = await text({ [field]: 1 }).catch((e: unknown) => e);
      expect(err).toBeInstanceOf(OpenAI.BadRequestError);
      expect((err as Error).message).toContain(`${field}: is not supported by the llama.cpp engine`);
    }
  });

  it("gives n choices over its sequences, and logprobs in OpenAI's shapes", async () => {
    const three = await openai.chat.completions.create({
      model: "tiny",
      messages: [{ role: "user", content: "Three ways" }],
      n: 3,
      max_tokens: 12,
      temperature: 1,
      seed: 5,
      logprobs: true,
      top_logprobs: 2,
    });
    expect(three.choices.map((c) => c.index).sort()).toEqual([0, 1, 2]);
    expect(new Set(three.choices.map((c) => c.message.content)).size).toBe(3);
    const content = three.choices[0]!.logprobs!.content!;
    expect(content.length).toBeGreaterThan(0);
    expect(content[0]).toMatchObject({
      token: expect.any(String),
      logprob: expect.any(Number),
      top_logprobs: [expect.anything(), expect.anything()],
    });
    const legacy = await openai.completions.create({ model: "tiny", prompt: "abc", max_tokens: 5, temperature: 0, logprobs: 2 });
    const lp = legacy.choices[0]!.logprobs!;
    expect(lp.tokens!.join("")).toBe(legacy.choices[0]!.text);
    expect(lp.token_logprobs).toHaveLength(lp.tokens!.length);
    expect(Object.keys(lp.top_logprobs![0]!)).toHaveLength(2);
    expect(lp.text_offset![1]).toBe(lp.tokens![0]!.length);
  });

  it("refuses embeddings from a runtime whose profile did not turn them on, saying how to", async () => {
    const err = await openai.embeddings.create({ model: "tiny", input: "x" }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(OpenAI.BadRequestError);
    expect((err as InstanceType<typeof OpenAI.BadRequestError>).code).toBe("embeddings_unsupported");
    expect((err as Error).message).toContain("forge runtimes create --embeddings");
  });

  it("stops only the cancelled one of 8 streams: its sequence is free again while the others run on", async () => {
    let late: Promise<Timed> | undefined;
    const runs = await Promise.all(
      Array.from({ length: parallel }, (_, i) =>
        timedStream(`cancel ${i}`, 1500, (t) => {
          if (i !== 3 || t.tokens.length < 20) return false;
          // The 9th request: it can only start at once if the cancelled one's sequence was freed.
          late = timedStream("after the cancel", 10);
          return true;
        }),
      ),
    );
    const others = runs.filter((_, i) => i !== 3);
    for (const r of others) expect({ finish: r.finish, tokens: r.completionTokens }).toEqual({ finish: "length", tokens: 1500 });
    expect(runs[3]!.finish).toBeNull();
    const ninth = await late!;
    expect(ninth.finish).toBe("length");
    expect(first(ninth)).toBeLessThan(Math.min(...others.map(last)));
  });
});
