// Serving held against hostile clients (issue #48), through a real control plane and a real agent
// process serving the tiny GGUF in llama.cpp:
// - streams whose clients never read, or read a byte a second, in every framing the port speaks
//   (gRPC, Connect and gRPC-Web on HTTP/2; Connect, gRPC-Web and the OpenAI API on HTTP/1.1),
//   hold no slot: a normal client is served within its deadline throughout;
// - a token limit holds under a burst of long prompts;
// - a truncated body and a malformed one are the client's fault, never an error-level line;
// - max_tokens past double's range is refused.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { once } from "node:events";
import http2 from "node:http2";
import tls from "node:tls";
import { Code, ConnectError, createClient } from "@connectrpc/connect";
import { UsageGrouping } from "../../gen/proto/modelforge/admin/v1/admin_pb.js";
import { eventually } from "../support/node.js";
import { openAiStream, postText } from "../support/http.js";
import { grpcTransport } from "../../common/http2-sessions.js";
import { DeploymentService, InvokeApi } from "../../gen/proto/modelforge/deployment/v1/deployment_pb.js";
import { writeTinyLlamaGguf } from "../../scripts/gguf.js";
import { startTestServer, type TestServer } from "../support/server.js";
import type { AgentProcess } from "../support/process.js";
import { errorLines, serveTiny, servingNode } from "../support/serving.js";
import { stalledReader, type Framing, type Reading, type Transport } from "../support/stalled-reader.js";
import { scrape } from "../support/prometheus.js";

let ts: TestServer;
let agent: AgentProcess;
let root: string;
let key: string;

const stallers: [Framing, Transport][] = [
  ["grpc", "h2"],
  ["connect", "h2"],
  ["grpc-web", "h2"],
  ["openai", "h2"],
  ["connect", "h1"],
  ["grpc-web", "h1"],
  ["openai", "h1"],
  ["grpc", "h2"],
];
/** A long answer: far more than the unread bound, had its caller read none of it. */
const longCompletion = { prompt: "Hello", max_tokens: 2000, temperature: 0 };
const shortCompletion = { prompt: "The quick brown fox", max_tokens: 4, temperature: 0 };

beforeAll(async () => {
  root = mkdtempSync(join(tmpdir(), "mf-hostile-"));
  const file = join(root, "tiny.gguf");
  const model = await writeTinyLlamaGguf(file, { contextLength: 4096 });
  ts = await startTestServer({
    MODELFORGE_APPROVED_ROOTS: root,
    MODELFORGE_HEARTBEAT_INTERVAL: "200ms",
    MODELFORGE_INVOKE_MAX_UNREAD: "16KiB",
    MODELFORGE_METRICS_ADDRESS: "127.0.0.1:0",
    MODELFORGE_USAGE_FLUSH: "200ms",
  });
  const serving = await servingNode(ts, root, "hostile", 4096);
  agent = serving.agent;
  await serveTiny(ts.admin, { nodeId: serving.node.nodeId, commit: "c".repeat(40), root, file, ...model });
  key = (await ts.admin.createServiceKey({ name: "svc", deployments: ["tiny"] })).secret;
}, 180_000);

afterAll(async () => {
  await agent?.stop();
  await ts?.stop();
  if (root) rmSync(root, { recursive: true, force: true });
});

/** A well-behaved client's unary invokes, one after another until `done()`; each waits out a 429's Retry-After within its own deadline. */
async function normalClient(done: () => Promise<boolean>, deadlineMs: number, tally = { attempts: 0 }) {
  const client = createClient(DeploymentService, grpcTransport({ baseUrl: ts.url, nodeOptions: { ca: ts.caPem } }));
  const served: number[] = [];
  while (!(await done())) {
    const started = performance.now();
    for (;;) {
      const left = Math.floor(deadlineMs - (performance.now() - started));
      if (left <= 0) throw new Error(`a normal request was not served within ${deadlineMs} ms`);
      tally.attempts++;
      const answer = await client
        .invoke(
          {
            deploymentId: "tiny",
            contentType: "application/json",
            payload: Buffer.from(JSON.stringify(shortCompletion)),
            api: InvokeApi.COMPLETIONS,
          },
          { headers: { authorization: `Bearer ${key}` }, timeoutMs: left },
        )
        .catch((err: unknown) => ConnectError.from(err));
      if (!(answer instanceof ConnectError)) break;
      if (answer.code !== Code.ResourceExhausted) throw answer;
      await new Promise((r) => setTimeout(r, 1_000 * Number(answer.metadata.get("retry-after") ?? "1")));
    }
    served.push(performance.now() - started);
  }
  return served;
}

const requestsEnded = async () => (await scrape(ts.server.metricsUrl!)).sum("modelforge_requests_total", { deployment: "tiny" });
const outcomes = async () => {
  const m = await scrape(ts.server.metricsUrl!);
  return Object.fromEntries(
    m.text
      .split("\n")
      .filter((l) => l.startsWith("modelforge_requests_total{"))
      .map((l) => [/outcome="([^"]+)"/.exec(l)![1]!, Number(l.split(" ").at(-1))]),
  );
};

describe.sequential("clients that do not read", () => {
  it.each<Reading>(["never", "a byte a second"])(
    "reading %s hold no slot: a normal client is served throughout",
    async (reading) => {
      const before = await requestsEnded();
      const stalledBefore = (await outcomes()).client_stalled ?? 0;
      const open = await Promise.all(
        stallers.map(([framing, transport]) =>
          stalledReader({ url: ts.url, ca: ts.caPem, framing, transport, reading, deployment: "tiny", key, completion: longCompletion }),
        ),
      );
      try {
        // Until every staller's request has ended on the server (all eight still connected, none
        // reading), then a little longer: every normal request is served within its deadline.
        const normal = { attempts: 0 };
        let endedAt: number | undefined;
        const served = await normalClient(
          async () => {
            const stallersEnded = (await requestsEnded()) - before - normal.attempts >= stallers.length;
            endedAt ??= stallersEnded ? performance.now() : undefined;
            return endedAt !== undefined && performance.now() - endedAt > 2_000;
          },
          30_000,
          normal,
        );
        expect(served.length).toBeGreaterThan(0);
        // Ended on the server while still connected: as stalled callers (cancelled on the node),
        // or, for an answer the connection's buffers took whole, ended with it.
        expect((await outcomes()).client_stalled).toBeGreaterThan(stalledBefore);
      } finally {
        for (const s of open) s.close();
      }
      expect(errorLines(ts.logs())).toEqual([]);
    },
    120_000,
  );
});

const openAiHeaders = (secret: string) => ({ authorization: `Bearer ${secret}`, "content-type": "application/json" });

/** A raw TLS connection speaking HTTP/1.1, for requests no client library would send. */
async function http1Socket(url: string, ca: string): Promise<tls.TLSSocket> {
  const { hostname, port } = new URL(url);
  const socket = tls.connect({ host: hostname, port: Number(port), ca, ALPNProtocols: ["http/1.1"], servername: "localhost" });
  socket.on("error", () => undefined);
  await once(socket, "secureConnect");
  return socket;
}

/** What the key used, as GetUsage adds it up once the usage is flushed. */
async function tokensOf(keyId: string) {
  const { rows } = await ts.admin.getUsage({ keyId, by: UsageGrouping.KEY });
  return rows.reduce((t, r) => t + Number(r.promptTokens + r.completionTokens), 0);
}

/** One OpenAI completion over HTTP/1.1, as the SDKs send it; its status and, for a refusal, its error. */
async function openAiCompletion(secret: string, body: object) {
  const res = await postText(`${ts.url}/v1/completions`, ts.caPem, JSON.stringify(body), openAiHeaders(secret));
  return {
    status: res.status,
    error: res.status === 200 ? undefined : (JSON.parse(res.text) as { error: { param: string | null; message: string } }).error,
  };
}

describe("token limits under a burst of long prompts", () => {
  // 900 characters of prompt and max_tokens 1: a request may use up to its body's bytes of prompt.
  const longPrompt = { model: "tiny", prompt: "x".repeat(900), max_tokens: 1, temperature: 0 };

  it.each([
    ["tokensPerMinute", 2_000],
    ["dailyTokens", 150],
  ] as const)(
    "%s %i holds: the tokens used never pass it",
    async (limit, value) => {
      const limits = limit === "tokensPerMinute" ? { tokensPerMinute: value } : { dailyTokens: BigInt(value) };
      const created = await ts.admin.createServiceKey({ name: `burst-${limit.toLowerCase()}`, deployments: ["tiny"], limits });
      const answers = await Promise.all(Array.from({ length: 64 }, () => openAiCompletion(created.secret, longPrompt)));
      const admitted = answers.filter((a) => a.status === 200).length;
      expect(answers.filter((a) => a.status !== 200).every((a) => a.status === 429)).toBe(true);
      // Every answered request is counted before the check (usage is flushed every 200 ms; a
      // request refused at admission never reached a runtime and has none).
      const counted = async () =>
        (await ts.admin.getUsage({ keyId: created.key!.id, by: UsageGrouping.KEY })).rows.reduce((n, r) => n + Number(r.requests), 0);
      await eventually(async () => (await counted()) >= admitted, 30_000, "usage flushed");
      const used = await tokensOf(created.key!.id);
      expect(used).toBeLessThanOrEqual(value);
      if (value > 1_000) expect(admitted).toBeGreaterThanOrEqual(1);
      else {
        // One request's reservation alone passes the quota: refused, saying so.
        expect(admitted).toBe(0);
        expect(answers[0]!.error!.message).toContain("more than this key's 150 tokens per day");
      }
    },
    60_000,
  );
});

describe("a client's faults are its own", () => {
  it("max_tokens past double's range is refused, naming it", async () => {
    const res = await postText(
      `${ts.url}/v1/completions`,
      ts.caPem,
      '{"model":"tiny","prompt":"x","max_tokens":1e400}',
      openAiHeaders(key),
    );
    expect(res.status).toBe(400);
    expect(JSON.parse(res.text).error.param).toBe("max_tokens");
  });

  it("truncated bodies and a malformed chunked one are never an error-level line", async () => {
    const body = JSON.stringify({ model: "tiny", prompt: "x".repeat(2_000), max_tokens: 1 });
    const leftBefore = callersLeft(ts.logs());
    await Promise.all(
      Array.from({ length: 50 }, async (_, i) => {
        // HTTP/1.1 and HTTP/2 by turns: a body that stops halfway and a client that goes away.
        if (i % 2 === 0) {
          const socket = await http1Socket(ts.url, ts.caPem);
          socket.write(
            `POST /v1/completions HTTP/1.1\r\nhost: localhost\r\nauthorization: Bearer ${key}\r\ncontent-type: application/json\r\ncontent-length: ${body.length}\r\n\r\n${body.slice(0, 100)}`,
          );
          await new Promise((r) => setTimeout(r, 50));
          socket.destroy();
        } else {
          const { session, req } = openAiStream(ts.url, ts.caPem, key, { "content-length": String(body.length) });
          // Connected first, as the HTTP/1.1 client is: a reset before the handshake ends reaches no request.
          await once(session, "connect");
          req.write(body.slice(0, 100));
          await new Promise((r) => setTimeout(r, 50));
          req.close(http2.constants.NGHTTP2_CANCEL);
          session.close();
        }
      }),
    );
    const socket = await http1Socket(ts.url, ts.caPem);
    socket.write(
      `POST /v1/completions HTTP/1.1\r\nhost: localhost\r\nauthorization: Bearer ${key}\r\ncontent-type: application/json\r\ntransfer-encoding: chunked\r\n\r\nzz\r\n{}\r\n0\r\n\r\n`,
    );
    const answer = await new Promise<string>((resolve) => {
      let text = "";
      socket.on("data", (d: Buffer) => (text += d.toString()));
      socket.on("close", () => resolve(text));
    });
    expect(answer).toMatch(/^HTTP\/1.1 400/);
    // Every truncated request's read ended, as the client's leaving (none waits on a body that never comes).
    await eventually(() => callersLeft(ts.logs()) - leftBefore >= 50, 30_000, "50 truncated requests ended as the client's leaving");
    // Time for the server to have logged whatever it logs of them.
    await new Promise((r) => setTimeout(r, 500));
    expect(errorLines(ts.logs())).toEqual([]);
  });
});

/** Requests the OpenAI front door ended as the client's leaving (499, logged at debug). */
function callersLeft(log: string): number {
  return log.split("\n").filter((l) => l.includes('"msg":"openai request refused"') && l.includes('"status":499')).length;
}
