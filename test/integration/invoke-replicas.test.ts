// An invoke that arrives at a replica not holding the serving node's Session (always PostgreSQL:
// replicas need it). Two control planes on one database and one CA; a real agent process holding
// the tiny GGUF keeps its Session on replica A; the deployment, the service key and every invoke
// go through replica B, which forwards to A with the caller's own key. A holder whose record went
// stale is not forwarded to, and a drain on A refuses new invokes arriving at B at once. A key's
// limit holds across both: a second agent keeps its Session on B, and one rate-limited key is
// driven through both replicas at once, each admitting on its own (its own KeyLimiter).
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import * as grpc from "@grpc/grpc-js";
import pg from "pg";
import { EngineKind } from "../../gen/proto/modelforge/jobs/v1/jobs_pb.js";
import { writeTinyLlamaGguf } from "../../scripts/gguf.js";
import { plainDeploymentService } from "../support/plain-grpc.js";
import { startTwoPlanes, type TestServer } from "../support/server.js";
import { createTestDatabase, type TestDatabase } from "../support/db.js";
import { enrollTestNode, eventually, type TestNode } from "../support/node.js";
import { spawnAgent, type AgentProcess } from "../support/process.js";
import { deployReady, errorLines, serveTiny } from "../support/serving.js";
import { openAiStream } from "../support/http.js";

const commit = "c".repeat(40);

let db: TestDatabase;
let a: TestServer;
let b: TestServer;
let root: string;
let node: TestNode;
let agent: AgentProcess;
let secret: string;
let viaB: any;

function unary(method: string, req: object, via = viaB, key = secret): Promise<any> {
  const md = new grpc.Metadata();
  md.set("authorization", `Bearer ${key}`);
  return new Promise((resolve, reject) => via[method](req, md, (e: unknown, r: unknown) => (e ? reject(e) : resolve(r))));
}
const completion = (max: number, extra: object = {}) =>
  Buffer.from(JSON.stringify({ prompt: "The quick brown fox", max_tokens: max, temperature: 0, ...extra }));

beforeAll(async () => {
  root = mkdtempSync(join(tmpdir(), "mf-invoke-replicas-"));
  const path = join(root, "tiny.gguf");
  const model = await writeTinyLlamaGguf(path, { contextLength: 8192 });
  db = await createTestDatabase("postgres");
  [a, b] = await startTwoPlanes(db.databaseUrl!, root);
  node = await enrollTestNode(a, "serving-on-a");
  agent = spawnAgent(node.statePath, {
    MODELFORGE_AGENT_RUNTIMES: "on",
    MODELFORGE_AGENT_ARTIFACT_SOURCES: "control-plane",
    MODELFORGE_AGENT_ARTIFACT_ROOTS: root,
  });
  // B sees the node online with its Session on A (from the heartbeats A flushed).
  await eventually(
    async () => {
      const n = (await b.admin.getNode({ nodeId: node.nodeId })).node!;
      return n.sessionReplica !== "" && n.capabilities.includes("deployment.load.v1");
    },
    30_000,
    "the agent's session on A, as B sees it",
  );
  expect(b.server.sessionsConnected(node.nodeId)).toBe(false);
  await b.admin.createRuntimeProfile({ name: "tiny-cpu", engine: EngineKind.LLAMA_CPP, contextSize: 8192, threads: 1 });
  await serveTiny(b.admin, { nodeId: node.nodeId, commit, root, file: path, sha256: model.sha256 });
  secret = (await b.admin.createServiceKey({ name: "svc", deployments: ["tiny"] })).secret;
  viaB = plainDeploymentService(b.url, b.caPem);
}, 180_000);

afterAll(async () => {
  viaB?.close();
  await agent?.stop();
  await b?.stop();
  await a?.stop();
  await db?.cleanup();
  if (root) rmSync(root, { recursive: true, force: true });
});

describe("a rate-limited key at both replicas", () => {
  let nodeB: TestNode;
  let agentB: AgentProcess;
  let viaA: any;
  beforeAll(async () => {
    nodeB = await enrollTestNode(b, "serving-on-b");
    agentB = spawnAgent(nodeB.statePath, {
      MODELFORGE_AGENT_RUNTIMES: "on",
      MODELFORGE_AGENT_ARTIFACT_SOURCES: "control-plane",
      MODELFORGE_AGENT_ARTIFACT_ROOTS: root,
    });
    await eventually(async () => b.server.sessionsConnected(nodeB.nodeId), 30_000, "the second agent's session on B");
    // The same model, already in the store, served from the node whose Session is on B.
    await deployReady(b.admin, {
      name: "tiny-b",
      nodeId: nodeB.nodeId,
      runtimeProfile: "tiny-cpu",
      repository: "acme/tiny",
      commit,
      targetRoot: root,
      maxInFlight: 8,
    });
    viaA = plainDeploymentService(a.url, a.caPem);
  }, 180_000);
  afterAll(async () => {
    viaA?.close();
    await agentB?.stop();
  });

  it("admits exactly its requests per minute between them, each replica admitting its own requests at once", async () => {
    const rpm = 6;
    const key = (await b.admin.createServiceKey({ name: "limited", deployments: ["tiny", "tiny-b"], limits: { requestsPerMinute: rpm } }))
      .secret;
    // rpm requests at each replica, all at once, each for the deployment whose node's Session is
    // there: none is forwarded, so each replica's own limiter admits its own.
    const calls = [...Array(rpm).fill(["tiny", viaA]), ...Array(rpm).fill(["tiny-b", viaB])] as [string, unknown][];
    const outcomes = await Promise.all(
      calls.map(([deploymentId, via]) =>
        unary("Invoke", { deploymentId, payload: completion(1) }, via, key).then(
          () => "admitted",
          (err) => (err.code === grpc.status.RESOURCE_EXHAUSTED ? `refused ${err.metadata.get("retry-after")[0] !== undefined}` : err),
        ),
      ),
    );
    // docs/clients.md: replicas never admit more than the limit between them (no overshoot), and
    // none is refused while the limit has room; every refusal says when to retry.
    expect(outcomes.filter((o) => o === "admitted")).toHaveLength(rpm);
    expect(outcomes.filter((o) => o !== "admitted")).toEqual(Array(rpm).fill("refused true"));
    expect(b.server.sessionsConnected(nodeB.nodeId) && a.server.sessionsConnected(node.nodeId)).toBe(true);
  }, 60_000);
});

describe("an invoke at the replica without the node's session", () => {
  it("is forwarded to the replica holding it: unary and streamed, real tokens back", async () => {
    const res = await unary("Invoke", { deploymentId: "tiny", contentType: "application/json", payload: completion(6) });
    const body = JSON.parse(Buffer.from(res.payload).toString("utf8"));
    expect(body.object).toBe("text_completion");
    expect(body.usage.completion_tokens).toBeGreaterThan(0);
    expect(res.revision).toBe("1");

    const md = new grpc.Metadata();
    md.set("authorization", `Bearer ${secret}`);
    const chunks: any[] = [];
    for await (const m of viaB.InvokeStream(
      { deploymentId: "tiny", payload: completion(10, { stream_options: { include_usage: true } }) },
      md,
    )) {
      chunks.push(JSON.parse(Buffer.from(m.payload).toString("utf8")));
    }
    expect(chunks.length).toBeGreaterThan(2);
    expect(chunks.at(-1).usage.completion_tokens).toBeGreaterThan(0);
  }, 60_000);

  it("passes the holder's typed refusals through: an invalid body, a deadline", async () => {
    await expect(unary("Invoke", { deploymentId: "tiny", contentType: "text/plain", payload: Buffer.from("x") })).rejects.toMatchObject({
      code: grpc.status.INVALID_ARGUMENT,
    });
    // A deadline no relay and no runtime can meet.
    await expect(
      unary("Invoke", { deploymentId: "tiny", payload: completion(64), timeout: { seconds: 0, nanos: 1_000_000 } }),
    ).rejects.toMatchObject({ code: grpc.status.DEADLINE_EXCEEDED });
  }, 60_000);

  it("is not forwarded to a replica whose record went stale (one that died)", async () => {
    const sql = new pg.Client({ connectionString: db.databaseUrl });
    await sql.connect();
    try {
      // Stale again before every try: A refreshes its record every 10 s.
      const refused = await eventually(
        async () => {
          await sql.query(`UPDATE "ControlPlaneReplica" SET "seenAt" = now() - interval '1 hour'`);
          return unary("Invoke", { deploymentId: "tiny", payload: completion(2) }).then(
            () => undefined,
            (err) => (String(err.details).includes("no replica holds its session") ? err : undefined),
          );
        },
        15_000,
        "B refusing for want of a live holder",
      );
      expect(refused.code).toBe(grpc.status.UNAVAILABLE);
    } finally {
      await sql.query(`UPDATE "ControlPlaneReplica" SET "seenAt" = now()`);
      await sql.end();
    }
  }, 30_000);

  it("a holder that cannot be reached is unavailable, naming it", async () => {
    const sql = new pg.Client({ connectionString: db.databaseUrl });
    await sql.connect();
    try {
      const refused = await eventually(
        async () => {
          // A port nothing listens on (A rewrites its record every 10 s, so again before every try).
          await sql.query(
            `UPDATE "ControlPlaneReplica" SET url = 'https://127.0.0.1:9', "seenAt" = now() WHERE url = $1 OR url = 'https://127.0.0.1:9'`,
            [a.url.replace("127.0.0.1", "localhost")],
          );
          return unary("Invoke", { deploymentId: "tiny", payload: completion(2) }).then(
            () => undefined,
            // grpc-js leaves the percent-encoding of ":" and "/" in grpc-message as it came.
            (err) => (decodeURIComponent(String(err.details)).includes("https://127.0.0.1:9") ? err : undefined),
          );
        },
        15_000,
        "B failing to reach the holder",
      );
      expect(refused.code).toBe(grpc.status.UNAVAILABLE);
      expect(decodeURIComponent(refused.details)).toContain("is not reachable: connect ECONNREFUSED");
    } finally {
      await sql.query(`UPDATE "ControlPlaneReplica" SET url = $1 WHERE url = 'https://127.0.0.1:9'`, [
        a.url.replace("127.0.0.1", "localhost"),
      ]);
      await sql.end();
    }
  }, 30_000);

  it("a limit's refusal says when its window ends and which limit it is, as the holder counted it", async () => {
    const limited = (await b.admin.createServiceKey({ name: "forwarded-limit", deployments: ["tiny"], limits: { requestsPerMinute: 2 } }))
      .secret;
    const viaA = plainDeploymentService(a.url, a.caPem);
    try {
      const refusal = (via: unknown) =>
        unary("Invoke", { deploymentId: "tiny", payload: completion(1) }, via, limited).then(
          () => undefined,
          (err) => err as grpc.ServiceError,
        );
      // Two admitted (forwarded to A, which counts them), then refused: first at A, then at B.
      // Retried in the next minute when the window is about to end (a refusal then says 1 s either way).
      const [fromA, fromB] = await eventually(
        async () => {
          while ((await refusal(viaB)) === undefined);
          const [atA, atB] = [await refusal(viaA), await refusal(viaB)];
          const seconds = (e: grpc.ServiceError | undefined) => Number(e?.metadata.get("retry-after")[0]);
          return seconds(atA) > 2 ? [atA!, atB!] : undefined;
        },
        70_000,
        "a refusal well inside the minute",
      );
      expect(fromB.code).toBe(grpc.status.RESOURCE_EXHAUSTED);
      expect(fromB.metadata.get("x-modelforge-limit")).toEqual(["rpm"]);
      const [secondsA, secondsB] = [fromA, fromB].map((e) => Number(e.metadata.get("retry-after")[0]));
      expect(Math.abs(secondsA! - secondsB!)).toBeLessThanOrEqual(1);
    } finally {
      viaA.close();
    }
  }, 90_000);

  it("streams cancelled at B mid-answer, by gRPC and by the OpenAI API, are never an error-level line at A or B", async () => {
    const long = { prompt: "Hello", max_tokens: 2000, temperature: 0 };
    const md = new grpc.Metadata();
    md.set("authorization", `Bearer ${secret}`);
    const ended = (at: TestServer) =>
      at
        .logs()
        .split("\n")
        .filter((l) => l.includes('"InvokeStream"') || l.includes("/v1/completions")).length;
    const endedBefore = ended(a);
    for (let chunks = 1; chunks <= 3; chunks++) {
      // A gRPC client cancelling after its first chunks (RST_STREAM CANCEL at B).
      const call = viaB.InvokeStream({ deploymentId: "tiny", payload: Buffer.from(JSON.stringify(long)) }, md);
      call.on("error", () => undefined);
      for (let n = 0; n < chunks; n++) await new Promise((resolve) => call.once("data", resolve));
      call.cancel();
      // An OpenAI client that goes away mid-stream: its connection closes under the answer.
      const { session, req } = openAiStream(b.url, b.caPem, secret);
      req.end(JSON.stringify({ model: "tiny", stream: true, ...long }));
      for (let n = 0; n < chunks; n++) await new Promise((resolve) => req.once("data", resolve));
      session.destroy();
    }
    // A ends each of the six forwarded streams (cancelled, its node's work with it).
    await eventually(async () => ended(a) - endedBefore >= 6, 20_000, "A ending the six forwarded streams");
    expect(errorLines(a.logs())).toEqual([]);
    expect(errorLines(b.logs())).toEqual([]);
  }, 60_000);

  it("a drain on A refuses new invokes arriving at B at once", async () => {
    await a.admin.drainDeployment({ deployment: "tiny" });
    await expect(unary("Invoke", { deploymentId: "tiny", payload: completion(4) })).rejects.toMatchObject({
      code: grpc.status.UNAVAILABLE,
      details: expect.stringContaining("draining"),
    });
  }, 30_000);
});
