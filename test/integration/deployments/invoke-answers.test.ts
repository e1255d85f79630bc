// How the server takes a node's invoke answers, through the real server and the agent's real
// session: an answer numbered 0 (what agents send now) is relayed and never acknowledged; one
// numbered as every other message (agents before) is still acknowledged; and one the edge refuses
// fails its request at once, not at the request's deadline, since no agent hears of the refusal.
import { createHash } from "node:crypto";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Code, ConnectError, type Client } from "@connectrpc/connect";
import { afterAll, beforeAll, describe, expect, it, vi } from "vitest";
import type { Reply } from "../../../gen/proto/modelforge/agent/v1/agent_pb.js";
import type { DeploymentService } from "../../../gen/proto/modelforge/deployment/v1/deployment_pb.js";
import { EngineKind } from "../../../gen/proto/modelforge/jobs/v1/jobs_pb.js";
import type { SessionDeployments } from "../../../agent/deployments/session-hook.js";
import { Outbox } from "../../../agent/session/link.js";
import { tinyLlamaGguf } from "../../../scripts/gguf.js";
import { startAgent, type InProcessAgent } from "../../support/agent.js";
import { enrollTestNode } from "../../support/node.js";
import { scriptedDeploymentAgent } from "../../support/scripted-agent.js";
import { serviceClient } from "../../support/usage-load.js";
import { startTestServer, type TestServer } from "../../support/server.js";
import { deployReady } from "../../support/serving.js";

const repository = "acme/answers";
const commit = "f".repeat(40);
const GiB = 2 ** 30;

let ts: TestServer;
let root: string;
let agent: InProcessAgent | undefined;
let client: Client<typeof DeploymentService>;
/** What the server acknowledged of the answers this agent sent awaiting a reply. */
const acknowledged: Promise<unknown>[] = [];

const answerOf = (text: string) => Buffer.from(JSON.stringify({ object: "text_completion", choices: [{ index: 0, text }] }));

/** The Session side of a node whose runtime answers as the prompt says: told, sent (awaiting a reply), or refused at the edge. */
const deployments: SessionDeployments = {
  held: () => [],
  loads: () => [],
  onLost: () => () => undefined,
  onMessage(message, link) {
    if (message.case !== "invoke") return;
    const invokeId = message.value.invokeId;
    const prompt = (JSON.parse(Buffer.from(message.value.invoke!.payload).toString()) as { prompt: string }).prompt;
    const value = { invokeId, contentType: "application/json", revision: 1n };
    if (prompt === "told") {
      // In two pieces, as a stream goes: both relayed, neither acknowledged.
      link.tell({ case: "invokeAnswer", value: { ...value, payload: answerOf("to") } });
      link.tell({ case: "invokeAnswer", value: { ...value, payload: answerOf("ld"), done: true } });
    } else if (prompt === "sent") {
      acknowledged.push(link.send({ case: "invokeAnswer", value: { ...value, payload: answerOf("sent"), done: true } }));
    } else {
      // A content type with a control character: refused at the edge.
      link.tell({ case: "invokeAnswer", value: { ...value, contentType: "application/json\u0007", payload: answerOf("x"), done: true } });
    }
  },
};

const invoke = (prompt: string) =>
  client.invoke(
    { deploymentId: "answers", contentType: "application/json", payload: Buffer.from(JSON.stringify({ prompt, max_tokens: 1 })) },
    { timeoutMs: 60_000 },
  );

beforeAll(async () => {
  root = mkdtempSync(join(tmpdir(), "mf-invoke-answers-"));
  ts = await startTestServer({ MODELFORGE_APPROVED_ROOTS: root, MODELFORGE_HEARTBEAT_INTERVAL: "200ms" });
  const node = await enrollTestNode(ts, "answers");
  agent = await startAgent(node, { ...scriptedDeploymentAgent(4 * GiB), deployments });
  await ts.admin.createRuntimeProfile({ name: "tiny-cpu", engine: EngineKind.LLAMA_CPP, contextSize: 1024 });
  const model = tinyLlamaGguf();
  const sha256 = createHash("sha256").update(model.bytes).digest("hex");
  const data = model.bytes;
  await ts.admin.uploadArtifactChunk({ repository, commit, path: "tiny.gguf", sizeBytes: BigInt(data.length), sha256, offset: 0n, data });
  await deployReady(ts.admin, { name: "answers", nodeId: node.nodeId, runtimeProfile: "tiny-cpu", repository, commit, targetRoot: root });
  const secret = (await ts.admin.createServiceKey({ name: "answers", deployments: ["answers"] })).secret;
  client = serviceClient(ts.url, ts.caPem, () => secret);
}, 120_000);

afterAll(async () => {
  vi.restoreAllMocks();
  await agent?.stop();
  await ts?.stop();
  if (root) rmSync(root, { recursive: true, force: true });
});

describe("invoke answers on the Session", () => {
  it("relays answers numbered 0 and sends no reply to them", async () => {
    const replies = vi.spyOn(Outbox.prototype, "answered");
    const answered = await invoke("told");
    expect(Buffer.from(answered.payload).toString()).toContain('"to"');
    // The server answers messages in order: a reply to an answer would come before the next heartbeat's.
    const before = replies.mock.calls.length;
    await expect.poll(() => replies.mock.calls.length, { timeout: 30_000 }).toBeGreaterThan(before);
    expect(replies.mock.calls.map(([r]: [Reply]) => r.messageId)).not.toContain(0n);
    replies.mockRestore();
  }, 60_000);

  it("still acknowledges an answer that asks for a reply, as agents before sent them", async () => {
    const answered = await invoke("sent");
    expect(Buffer.from(answered.payload).toString()).toContain('"sent"');
    expect(acknowledged).toHaveLength(1);
    // Acknowledged with an empty result, not refused.
    await expect(acknowledged[0]).resolves.toEqual({ case: undefined });
  }, 60_000);

  it("fails the request at once when the node's answer is refused at the edge", async () => {
    const started = performance.now();
    const err = await invoke("refused").then(
      () => undefined,
      (e: unknown) => ConnectError.from(e),
    );
    expect(err?.code).toBe(Code.Internal);
    expect(err?.rawMessage).toContain("the node's answer was refused");
    // Far inside the 60 s deadline the request would otherwise have waited out.
    expect(performance.now() - started).toBeLessThan(30_000);
  }, 90_000);
});
