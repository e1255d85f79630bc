// A graceful stop drains the invokes in flight before it closes the node sessions they run over:
// a real control plane, a real agent process holding the tiny GGUF in llama.cpp, a gRPC
// client (Connect). The runtime is paused (SIGSTOP) so a stream is certainly in flight when stop() begins;
// health turns NOT_SERVING, a new invoke is refused `unavailable`, the session stays open; once the
// runtime goes on the stream completes with every chunk, and only then does the server stop. With a
// short grace and the runtime held, the grace runs out: the invoke is cut, and one warning says so.
import http2 from "node:http2";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { Code, ConnectError, createClient, type Client } from "@connectrpc/connect";
import { grpcTransport } from "../../common/http2-sessions.js";
import { Health, HealthCheckResponse_ServingStatus as Status } from "../../gen/proto/grpc/health/v1/health_pb.js";
import { DeploymentService } from "../../gen/proto/modelforge/deployment/v1/deployment_pb.js";
import { EngineKind } from "../../gen/proto/modelforge/jobs/v1/jobs_pb.js";
import { writeTinyLlamaGguf } from "../../scripts/gguf.js";
import { startTestServer, type TestServer } from "../support/server.js";
import { enrollTestNode, eventually, type TestNode } from "../support/node.js";
import type { AgentProcess } from "../support/process.js";
import { serveTiny, spawnServingAgent } from "../support/serving.js";
import { jobToEnd } from "../support/jobs.js";
import { call } from "../support/raw-call.js";

let ts: TestServer;
let root: string;
let node: TestNode;
let agent: AgentProcess;
let deploymentId: string;
let deployments: Client<typeof DeploymentService>;
let headers: Record<string, string>;

const completion = (max: number) => ({
  deploymentId: "tiny",
  payload: Buffer.from(
    JSON.stringify({ prompt: "The quick brown fox", max_tokens: max, temperature: 0, stream_options: { include_usage: true } }),
  ),
});

/** A server with this shutdown grace, an agent process serving "tiny", and a service key, for the describe it is called in. */
function servingWithGrace(grace: string): void {
  beforeAll(async () => {
    root = mkdtempSync(join(tmpdir(), "mf-drain-"));
    const path = join(root, "tiny.gguf");
    const model = await writeTinyLlamaGguf(path, { contextLength: 8192 });
    ts = await startTestServer({
      MODELFORGE_HEARTBEAT_INTERVAL: "200ms",
      MODELFORGE_APPROVED_ROOTS: root,
      MODELFORGE_SHUTDOWN_GRACE: grace,
    });
    node = await enrollTestNode(ts, "draining");
    await ts.admin.createRuntimeProfile({ name: "tiny-cpu", engine: EngineKind.LLAMA_CPP, contextSize: 8192, threads: 1 });
    agent = await spawnServingAgent(ts.admin, node, root);
    deploymentId = await serveTiny(ts.admin, { nodeId: node.nodeId, commit: "d".repeat(40), root, file: path, sha256: model.sha256 });
    headers = { authorization: `Bearer ${(await ts.admin.createServiceKey({ name: "svc", deployments: ["tiny"] })).secret}` };
    deployments = createClient(DeploymentService, grpcTransport({ baseUrl: ts.url, nodeOptions: { ca: ts.caPem } }));
  }, 180_000);

  afterAll(async () => {
    await agent?.stop();
    await ts?.stop();
    if (root) rmSync(root, { recursive: true, force: true });
  });
}

describe("stop() with a streaming invoke in flight", () => {
  // A grace far longer than the test needs: the stream must finish because it was waited for.
  servingWithGrace("120s");

  it("reports NOT_SERVING, refuses new invokes, lets the stream finish, and only then ends the session", async () => {
    // Warm: the connection is open before the stop (a stopping server takes no new ones).
    await deployments.invoke(completion(2), { headers });
    // The OpenAI API, on a connection opened before the stop too.
    const openAi = http2.connect(ts.url, { ca: ts.caPem });
    openAi.on("error", () => undefined);
    const body = Buffer.from('{"model":"tiny","prompt":"a","max_tokens":2}');
    const openAiCall = () =>
      call(openAi, "/v1/completions", "application/json", { bytes: body.length, data: body }, { authorization: headers.authorization! });
    expect((await openAiCall()).code).toBe("ok");
    const health = createClient(Health, grpcTransport({ baseUrl: ts.url, nodeOptions: { ca: ts.caPem } }));
    const watching = new AbortController();
    const statuses: Status[] = [];
    const watched = (async () => {
      for await (const r of health.watch({ service: "" }, { signal: watching.signal })) statuses.push(r.status);
      return "ended";
    })().catch((err: unknown) => `failed: ${ConnectError.from(err).rawMessage}`);
    await eventually(() => statuses[0] === Status.SERVING, 30_000, "health SERVING");

    const pid = runtimePid();
    process.kill(pid, "SIGSTOP");
    let resumed = false;
    try {
      const chunks = (async () => {
        const all: { usage?: { completion_tokens: number } }[] = [];
        for await (const m of deployments.invokeStream(completion(24), { headers }))
          all.push(JSON.parse(Buffer.from(m.payload).toString("utf8")));
        return all;
      })();
      chunks.catch(() => undefined);
      await inFlightOnNode();

      const stopping = ts.server.stop();
      await eventually(() => statuses.includes(Status.NOT_SERVING), 30_000, "health NOT_SERVING");
      await expect(deployments.invoke(completion(2), { headers })).rejects.toMatchObject({
        code: Code.Unavailable,
        rawMessage: "this control plane is shutting down: retry on another replica",
      });
      // 503 on the OpenAI API, in OpenAI's shape, so its clients go elsewhere too.
      expect((await openAiCall()).code).toBe("service_unavailable");
      // Still draining: the session the stream runs over is open, the server not stopped.
      expect(ts.server.sessionsConnected(node.nodeId)).toBe(true);
      expect(ts.logs()).not.toContain('"msg":"stopped"');

      process.kill(pid, "SIGCONT");
      resumed = true;
      const all = await chunks;
      expect(all.length).toBeGreaterThan(2);
      expect(all.at(-1)?.usage?.completion_tokens).toBeGreaterThan(0);
      // Stopped well within the 120 s grace: the watch, too, was ended by the server, normally.
      await stopping;
      expect(await watched).toBe("ended");
      expect(statuses).toEqual([Status.SERVING, Status.NOT_SERVING]);
      expect(ts.server.sessionsConnected(node.nodeId)).toBe(false);
      const messages = logLines().map((l) => l.msg);
      expect(messages.filter((m) => m === "shutting down")).toHaveLength(1);
      expect(messages).not.toContain("shutdown grace ran out: cutting the invokes still in flight");
      expect(messages.indexOf("stopped")).toBeGreaterThan(messages.indexOf("shutting down"));
    } finally {
      if (!resumed) process.kill(pid, "SIGCONT");
      watching.abort();
      await watched;
      openAi.close();
    }
  }, 120_000);
});

describe("stop() when the grace runs out", () => {
  servingWithGrace("2s");

  it("cuts the invoke still in flight as unavailable, warns once, and stops", async () => {
    const pid = runtimePid();
    process.kill(pid, "SIGSTOP");
    try {
      const outcome = (async () => {
        let chunks = 0;
        try {
          for await (const _ of deployments.invokeStream(completion(24), { headers })) chunks++;
          return { chunks, code: undefined, message: "" };
        } catch (err) {
          const e = ConnectError.from(err);
          return { chunks, code: e.code, message: e.rawMessage };
        }
      })();
      await inFlightOnNode();
      await ts.server.stop();
      expect(await outcome).toEqual({ chunks: 0, code: Code.Unavailable, message: "the node's session ended during the request" });
      const cut = logLines().filter((l) => l.msg === "shutdown grace ran out: cutting the invokes still in flight");
      // pino's level 40 is warn.
      expect(cut).toEqual([expect.objectContaining({ level: 40, inFlight: 1, graceMs: 2_000 })]);
    } finally {
      process.kill(pid, "SIGCONT");
    }
  }, 120_000);
});

function logLines(): { level: number; msg: string; inFlight?: number }[] {
  return ts
    .logs()
    .split("\n")
    .filter((l) => l.startsWith("{"))
    .map((l) => JSON.parse(l));
}

/** The pid of the llama.cpp worker the agent started (its runtime registry beside the state). */
function runtimePid(): number {
  const registry = JSON.parse(readFileSync(join(dirname(node.statePath), "runtimes.json"), "utf8")) as { runtimes: { pid: number }[] };
  expect(registry.runtimes).toHaveLength(1);
  return registry.runtimes[0]!.pid;
}

/** Until the node counts the request in flight (its layered health says so). */
function inFlightOnNode(): Promise<unknown> {
  return eventually(
    async () => {
      const revision = 1n;
      const h = await jobToEnd(ts.admin, node.nodeId, { kind: { case: "deploymentHealth", value: { deploymentId, revision } } }, 30_000);
      const r = h.result?.result;
      return r?.case === "deploymentHealth" && r.value.detail.includes("1 in flight");
    },
    30_000,
    "the request in flight on the node",
  );
}
