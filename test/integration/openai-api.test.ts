// The OpenAI HTTP API at the control plane, called the way users call it: the official `openai`
// SDK (v6) over HTTP/1.1 with the control plane's CA, against a real agent process holding the
// tiny GGUF in llama.cpp. Models, chat, completions, embeddings, a stream read with `for await`,
// the SDK's error classes (an openai-http deployment's embeddings among them), clients that go away freeing their places, and an oversized body that ends only
// its own HTTP/2 stream.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import http2 from "node:http2";
import OpenAI from "openai";
import { Agent, fetch as undiciFetch } from "undici";
import { EngineKind } from "../../gen/proto/modelforge/jobs/v1/jobs_pb.js";
import { UsageGrouping } from "../../gen/proto/modelforge/admin/v1/admin_pb.js";
import { writeTinyLlamaGguf } from "../../scripts/gguf.js";
import { startTestServer, testAdminKey, type TestServer } from "../support/server.js";
import { enrollTestNode, eventually, type TestNode } from "../support/node.js";
import type { AgentProcess } from "../support/process.js";
import { deployReady, serveTiny, spawnServingAgent, writeLlamaServerTemplate } from "../support/serving.js";
import { scrape } from "../support/prometheus.js";
import { openAiStream } from "../support/http.js";
import { forgeAt } from "../support/forge.js";
import { oversizedThenNormal } from "../support/oversize.js";

let ts: TestServer;
let root: string;
let node: TestNode;
let agent: AgentProcess;
let secret: string;
let dispatcher: Agent;

/** The tiny model's embedding length (llama.embedding_length in scripts/gguf.ts). */
const tinyEmbeddingLength = 64;

/** The SDK as a user sets it up, trusting the control plane's CA. */
function client(apiKey: string, extra: Record<string, string> = {}): OpenAI {
  return new OpenAI({
    apiKey,
    baseURL: `${ts.url}/v1`,
    maxRetries: 0,
    defaultHeaders: extra,
    fetch: (url, init) => undiciFetch(url as string, { ...(init as object), dispatcher }) as unknown as Promise<Response>,
  });
}

beforeAll(async () => {
  root = mkdtempSync(join(tmpdir(), "mf-openai-root-"));
  const path = join(root, "tiny.gguf");
  const model = { path, ...(await writeTinyLlamaGguf(path, { contextLength: 8192 })) };
  ts = await startTestServer({
    MODELFORGE_HEARTBEAT_INTERVAL: "200ms",
    MODELFORGE_APPROVED_ROOTS: root,
    MODELFORGE_USAGE_FLUSH: "200ms",
    MODELFORGE_METRICS_ADDRESS: "127.0.0.1:0",
  });
  dispatcher = new Agent({ connect: { ca: ts.caPem } });
  node = await enrollTestNode(ts, "openai");
  await ts.admin.createRuntimeProfile({ name: "tiny-cpu", engine: EngineKind.LLAMA_CPP, contextSize: 8192, threads: 1, embeddings: true });
  await ts.admin.createRuntimeProfile({ name: "tiny-http", engine: EngineKind.OPENAI_HTTP, contextSize: 1024, threads: 1 });
  // The openai-http engine runs the llama.cpp worker, which could embed: the control plane refuses
  // its embeddings all the same, because the engine is not advertised as serving them.
  const template = join(root, "openai-http.json");
  writeLlamaServerTemplate(template);
  agent = await spawnServingAgent(ts.admin, node, root, { MODELFORGE_AGENT_OPENAI_HTTP_TEMPLATE: template });
  await serveTiny(ts.admin, { nodeId: node.nodeId, commit: "c".repeat(40), root, file: model.path, sha256: model.sha256 });
  await deployReady(ts.admin, {
    name: "tiny-http",
    nodeId: node.nodeId,
    runtimeProfile: "tiny-http",
    repository: "acme/tiny",
    commit: "c".repeat(40),
    targetRoot: root,
  });
  secret = (await ts.admin.createServiceKey({ name: "svc", deployments: ["tiny"] })).secret;
}, 240_000);

afterAll(async () => {
  await dispatcher?.close();
  await agent?.stop();
  await ts?.stop();
  if (root) rmSync(root, { recursive: true, force: true });
});

describe("the OpenAI API through the official SDK", () => {
  it("lists the deployments in the key's scope as models", async () => {
    const models = [];
    for await (const m of client(secret).models.list()) models.push(m);
    expect(models).toEqual([{ id: "tiny", object: "model", created: expect.any(Number), owned_by: "modelforge" }]);
    expect(models[0]!.created).toBeGreaterThan(1_700_000_000);
  }, 30_000);

  it("answers chat and completions with real tokens, named by the deployment, with a request id", async () => {
    const { data: chat, response } = await client(secret)
      .chat.completions.create({ model: "tiny", messages: [{ role: "user", content: "hi" }], max_tokens: 4, temperature: 0 })
      .withResponse();
    expect(chat.object).toBe("chat.completion");
    expect(chat.model).toBe("tiny");
    expect(chat.usage!.completion_tokens).toBeGreaterThan(0);
    expect(response.headers.get("x-request-id")).toMatch(/\S/);
    const text = await client(secret).completions.create({ model: "tiny", prompt: "The quick brown fox", max_tokens: 6, temperature: 0 });
    expect(text.object).toBe("text_completion");
    expect(text.model).toBe("tiny");
    expect(text.choices[0]!.text.length).toBeGreaterThan(0);
  }, 60_000);

  it("streams chunks read with for await, ending at [DONE], with usage only when asked", async () => {
    const ask = (includeUsage: boolean) =>
      client(secret).chat.completions.create({
        model: "tiny",
        messages: [{ role: "user", content: "count" }],
        max_tokens: 12,
        temperature: 0,
        stream: true,
        ...(includeUsage ? { stream_options: { include_usage: true } } : {}),
      });
    const plain = [];
    for await (const chunk of await ask(false)) plain.push(chunk);
    expect(plain.length).toBeGreaterThan(2);
    expect(plain.every((c) => c.model === "tiny" && c.usage === undefined)).toBe(true);
    expect(plain.map((c) => c.choices[0]?.delta?.content ?? "").join("").length).toBeGreaterThan(0);
    const counted = [];
    for await (const chunk of await ask(true)) counted.push(chunk);
    const last = counted.at(-1)!;
    expect(last.choices).toEqual([]);
    expect(last.usage!.completion_tokens).toBeGreaterThan(0);
  }, 60_000);

  it("maps refusals onto the SDK's error classes", async () => {
    await expect(client("mfsk_not-a-key").models.list()).rejects.toBeInstanceOf(OpenAI.AuthenticationError);
    await expect(client(testAdminKey).models.list()).rejects.toBeInstanceOf(OpenAI.AuthenticationError);
    // The operator key beside a valid service key: refused, never mistaken for a service client.
    await expect(client(secret, { "x-modelforge-admin-token": testAdminKey }).models.list()).rejects.toBeInstanceOf(
      OpenAI.PermissionDeniedError,
    );
    const missing = await client(secret)
      .chat.completions.create({ model: "nope", messages: [{ role: "user", content: "hi" }] })
      .catch((e: unknown) => e);
    expect(missing).toBeInstanceOf(OpenAI.NotFoundError);
    expect((missing as InstanceType<typeof OpenAI.NotFoundError>).code).toBe("model_not_found");
    const bad = await client(secret)
      .chat.completions.create({ model: "tiny", messages: [{ role: "user", content: "hi" }], stream: "yes" as unknown as false })
      .catch((e: unknown) => e);
    expect(bad).toBeInstanceOf(OpenAI.BadRequestError);
    const { secret: http } = await ts.admin.createServiceKey({ name: "http", deployments: ["tiny-http"] });
    const embeddings = await client(http)
      .embeddings.create({ model: "tiny-http", input: "hi" })
      .catch((e: unknown) => e);
    expect(embeddings).toBeInstanceOf(OpenAI.BadRequestError);
    expect((embeddings as InstanceType<typeof OpenAI.BadRequestError>).code).toBe("embeddings_unsupported");
    // The same deployment still generates: only the API it does not serve is refused.
    // Greedy, on the prompt the first test generates from: a sampled token may be the end of text or an empty piece.
    const text = await client(http).completions.create({
      model: "tiny-http",
      prompt: "The quick brown fox",
      max_tokens: 6,
      temperature: 0,
    });
    expect(text.usage!.completion_tokens).toBeGreaterThan(0);
    expect(text.choices[0]!.text.length).toBeGreaterThan(0);
    const bounded = await client(secret)
      .embeddings.create({ model: "tiny", input: ["a", ""] })
      .catch((e: unknown) => e);
    expect(bounded).toBeInstanceOf(OpenAI.BadRequestError);
    expect((bounded as InstanceType<typeof OpenAI.BadRequestError>).message).toContain("input: must be a non-empty string");
  }, 60_000);

  it("embeds through llama.cpp's embedding context: a vector per input, its prompt tokens recorded", async () => {
    const { secret: embedder, key } = await ts.admin.createServiceKey({ name: "embed", deployments: ["tiny"] });
    // The SDK asks for base64 by default and decodes it; floats asked for explicitly are the same vectors.
    const answer = await client(embedder).embeddings.create({ model: "tiny", input: ["a", "b"] });
    expect(answer.object).toBe("list");
    expect(answer.model).toBe("tiny");
    expect(answer.data.map((d) => [d.object, d.index, d.embedding.length])).toEqual([
      ["embedding", 0, tinyEmbeddingLength],
      ["embedding", 1, tinyEmbeddingLength],
    ]);
    expect(answer.data[0]!.embedding).not.toEqual(answer.data[1]!.embedding);
    expect(answer.usage.prompt_tokens).toBeGreaterThan(0);
    expect(answer.usage.total_tokens).toBe(answer.usage.prompt_tokens);
    const floats = await client(embedder).embeddings.create({ model: "tiny", input: ["a", "b"], encoding_format: "float" });
    expect(floats.data.map((d) => d.embedding)).toEqual(answer.data.map((d) => Array.from(d.embedding)));
    await eventually(
      async () => {
        const row = (await ts.admin.getUsage({ keyId: key!.id, by: UsageGrouping.KEY })).rows[0];
        return Number(row?.requests ?? 0) === 2 && Number(row?.promptTokens) === 2 * answer.usage.prompt_tokens;
      },
      20_000,
      "both embeddings requests' prompt tokens recorded",
    );
    const row = (await ts.admin.getUsage({ keyId: key!.id, by: UsageGrouping.KEY })).rows[0]!;
    expect(Number(row.completionTokens)).toBe(0);
  }, 60_000);

  it("answers 429 with Retry-After while the requests in flight are used up, and frees them when clients go away", async () => {
    // serveTiny allows 8 in flight. The runtime is paused (SIGSTOP), so eight streams stay in
    // flight (at the runtime or waiting on the node), and a ninth is refused at the control plane.
    const pid = runtimePid();
    process.kill(pid, "SIGSTOP");
    let resumed = false;
    try {
      const aborts = Array.from({ length: 8 }, () => new AbortController());
      const held = aborts.map((a) =>
        client(secret)
          .completions.create({ model: "tiny", prompt: "Once upon a time", max_tokens: 64, stream: true }, { signal: a.signal })
          .then(async (s) => {
            for await (const _ of s) if (a.signal.aborted) break;
          })
          .catch(() => undefined),
      );
      // A ninth admitted before all eight were (they race) waits on the node: it gives up soon and is tried again.
      const ninth = (timeout?: number) =>
        client(secret)
          .completions.create({ model: "tiny", prompt: "x", max_tokens: 1 }, timeout ? { timeout } : {})
          .withResponse();
      let refused: unknown;
      await eventually(
        async () => {
          refused = await ninth(2_000).then(
            () => undefined,
            (e: unknown) => e,
          );
          return refused instanceof OpenAI.RateLimitError;
        },
        30_000,
        "a ninth request refused while eight are in flight",
      );
      expect((refused as InstanceType<typeof OpenAI.RateLimitError>).headers?.get("retry-after")).toBe("1");
      expect((refused as InstanceType<typeof OpenAI.RateLimitError>).code).toBe("rate_limit_exceeded");
      // The clients go away: their places free up (the relay passes each cancellation on to the
      // node, as test/unit/invoke-rules.test.ts shows), and the runtime goes on.
      for (const a of aborts) a.abort();
      await Promise.all(held);
      process.kill(pid, "SIGCONT");
      resumed = true;
      await eventually(
        async () => (await ninth().catch(() => undefined))?.data.model === "tiny",
        20_000,
        "the ninth request answered once the control plane saw the clients go",
      );
    } finally {
      if (!resumed) process.kill(pid, "SIGCONT");
    }
  }, 120_000);

  it("ends a stream at once when its HTTP/2 client leaves mid-answer, though the runtime has stopped answering", async () => {
    const metrics = async () => scrape(ts.server.metricsUrl!);
    const canceledBefore = (await metrics()).value("modelforge_requests_total", { deployment: "tiny", outcome: "canceled" }) ?? 0;
    const { session, req } = openAiStream(ts.url, ts.caPem, secret);
    // The end of sequence banned: the answer runs far longer than the test.
    req.end(JSON.stringify({ model: "tiny", stream: true, prompt: "Once upon a time", max_tokens: 4000, logit_bias: { "2": -100 } }));
    await new Promise((resolve) => req.once("data", resolve));
    // Paused, the runtime can neither finish the answer nor end it: only the client's leaving can.
    const pid = runtimePid();
    process.kill(pid, "SIGSTOP");
    try {
      session.destroy();
      await eventually(
        async () => {
          const m = await metrics();
          return (
            m.value("modelforge_requests_in_flight", { deployment: "tiny" }) === 0 &&
            m.value("modelforge_requests_total", { deployment: "tiny", outcome: "canceled" }) === canceledBefore + 1
          );
        },
        15_000,
        "the stream ended as canceled, its place in flight freed",
      );
    } finally {
      process.kill(pid, "SIGCONT");
    }
  }, 60_000);

  it("records the tokens delivered per key: whole answers, streams, and a stream the client left", async () => {
    const { secret: acct, key } = await ts.admin.createServiceKey({ name: "acct", deployments: ["tiny"] });
    const sdk = client(acct);
    const chat = await sdk.chat.completions.create({ model: "tiny", messages: [{ role: "user", content: "hi" }], max_tokens: 8 });
    // The same greedy stream twice: once asking for its usage, once not (its usage is counted all the same).
    const stream = (includeUsage: boolean) =>
      sdk.completions.create({
        model: "tiny",
        prompt: "a",
        max_tokens: 16,
        temperature: 0,
        stream: true,
        ...(includeUsage ? { stream_options: { include_usage: true } } : {}),
      });
    let streamed = 0;
    for await (const c of await stream(true)) if (c.usage) streamed = c.usage.completion_tokens;
    for await (const c of await stream(false)) expect(c.usage).toBeUndefined();
    const expected = chat.usage!.completion_tokens + 2 * streamed;
    const flushed = async () => (await ts.admin.getUsage({ keyId: key!.id, by: UsageGrouping.KEY })).rows[0];
    let recorded: unknown;
    await eventually(
      async () => {
        recorded = (await flushed())?.completionTokens;
        return Number(recorded ?? -1) === expected;
      },
      20_000,
      `${expected} tokens recorded`,
    ).catch((err: Error) => {
      throw new Error(`${err.message}; recorded ${String(recorded)}`);
    });
    // A client that goes away after three chunks, watching the running usage: what was delivered
    // before it left is counted, not the 4000 tokens asked for.
    const abort = new AbortController();
    let seen = 0;
    let chunks = 0;
    const left = await sdk.completions.create(
      {
        model: "tiny",
        // Greedy from "a": the tiny model's seeded weights never end it early.
        prompt: "a",
        max_tokens: 4000,
        temperature: 0,
        stream: true,
        stream_options: { include_usage: true, continuous_usage_stats: true } as { include_usage: boolean },
      },
      { signal: abort.signal },
    );
    await (async () => {
      for await (const c of left) {
        if (c.usage) seen = c.usage.completion_tokens;
        if (++chunks === 3) abort.abort();
      }
    })().catch(() => undefined);
    expect(seen).toBeGreaterThan(0);
    await eventually(async () => Number((await flushed())?.requests ?? 0) === 4, 20_000, "the fourth request recorded");
    const row = (await flushed())!;
    const cancelled = Number(row.completionTokens) - expected;
    expect(cancelled).toBeGreaterThanOrEqual(seen);
    expect(cancelled).toBeLessThan(4000);
    expect(Number(row.failedRequests)).toBe(1);
    expect(Number(row.promptTokens)).toBeGreaterThan(0);
  }, 60_000);

  it("holds a key to its limits, set with forge: 429 with Retry-After, rate or quota", async () => {
    const forge = forgeAt(ts.url, ts.caPem, root, testAdminKey);
    const made = await forge(["service-keys", "create", "--name", "limited", "--deployment", "tiny", "--rpm", "2", "--json"]);
    expect(made.code, made.stderr).toBe(0);
    const { secret: limited, key } = JSON.parse(made.stdout) as { secret: string; key: { id: string } };
    const ask = () => client(limited).completions.create({ model: "tiny", prompt: "x", max_tokens: 2 });
    await ask();
    await ask();
    const third = await ask().catch((e: unknown) => e);
    expect(third).toBeInstanceOf(OpenAI.RateLimitError);
    expect((third as InstanceType<typeof OpenAI.RateLimitError>).code).toBe("rate_limit_exceeded");
    const wait = Number((third as InstanceType<typeof OpenAI.RateLimitError>).headers?.get("retry-after"));
    expect(wait).toBeGreaterThanOrEqual(1);
    expect(wait).toBeLessThanOrEqual(60);
    // A day's quota smaller than one request's reservation: refused as insufficient_quota.
    const updated = await forge(["service-keys", "update", key.id, "--daily-tokens", "10"]);
    expect(updated.code, updated.stderr).toBe(0);
    expect(updated.stdout).toContain("10/day");
    const quota = await client(limited)
      .completions.create({ model: "tiny", prompt: "x", max_tokens: 50 })
      .catch((e: unknown) => e);
    expect(quota).toBeInstanceOf(OpenAI.RateLimitError);
    expect((quota as InstanceType<typeof OpenAI.RateLimitError>).code).toBe("insufficient_quota");
    const listed = await forge(["service-keys", "list"]);
    expect(listed.stdout).toMatch(/limited .* 10\/day/);
    const audit = (await ts.admin.listAuditEvents({ targetId: key.id })).events.map((e) => e.action);
    expect(audit).toContain("service_key.limits_changed");
  }, 60_000);

  it("counts tokens, requests and latencies per deployment in Prometheus, as the usage records them", async () => {
    await eventually(
      async () => {
        const m = await scrape(ts.server.metricsUrl!);
        const usage = (await ts.admin.getUsage({ deployment: "tiny", by: UsageGrouping.DEPLOYMENT })).rows[0];
        return m.value("modelforge_tokens_total", { deployment: "tiny", kind: "completion" }) === Number(usage?.completionTokens ?? -1);
      },
      20_000,
      "the completion tokens counted alike in Prometheus and in the usage",
    );
    const m = await scrape(ts.server.metricsUrl!);
    expect(m.value("modelforge_requests_total", { deployment: "tiny", outcome: "resource_exhausted" })).toBeGreaterThanOrEqual(1);
    expect(m.value("modelforge_requests_total", { deployment: "tiny", outcome: "canceled" })).toBeGreaterThanOrEqual(1);
    expect(m.value("modelforge_time_to_first_token_seconds_count", { deployment: "tiny" })).toBeGreaterThan(0);
    expect(m.value("modelforge_inter_token_latency_seconds_count", { deployment: "tiny" })).toBeGreaterThan(0);
    expect(m.value("modelforge_request_duration_seconds_count", { deployment: "tiny" })).toBeGreaterThan(0);
    expect(m.value("modelforge_requests_in_flight", { deployment: "tiny" })).toBe(0);
    // Labels carry deployment names, never a key's id or secret.
    const keys = (await ts.admin.listServiceKeys({})).keys;
    for (const k of keys) expect(m.text).not.toContain(k.id);
    expect(m.text).not.toContain("mfsk_");
  }, 60_000);

  it("answers an oversized body 413 and ends only that HTTP/2 stream: the next call on the connection succeeds", async () => {
    const session = http2.connect(ts.url, { ca: ts.caPem });
    try {
      const headers = { authorization: `Bearer ${secret}` };
      // 12 MiB written whole, twice: past a node:http2 client's own 10 MB session memory (issue #34).
      const { oversized, normal } = await oversizedThenNormal(
        session,
        { path: "/v1/chat/completions", contentType: "application/json", headers },
        12 * 1024 * 1024,
        { path: "/v1/models", contentType: "application/json", headers, method: "GET" },
        2,
      );
      expect(oversized.map((a) => a.code)).toEqual(["request_too_large", "request_too_large"]);
      expect(normal.code).toBe("ok");
    } finally {
      session.close();
    }
  }, 60_000);
});

/** The pid of the llama-server the agent started (its runtime registry beside the state). */
function runtimePid(): number {
  const registry = JSON.parse(readFileSync(join(dirname(node.statePath), "runtimes.json"), "utf8")) as {
    runtimes: { pid: number; engine: string }[];
  };
  // "tiny" is the one llama.cpp runtime; "tiny-http" runs beside it as openai-http.
  const tiny = registry.runtimes.filter((r) => r.engine === "llama.cpp");
  expect(tiny).toHaveLength(1);
  return tiny[0]!.pid;
}
