// Prefix-aware routing through the real server, four real agent processes and the tiny GGUF, one
// replica on each: a conversation's turns all land on one replica and its cached tokens grow;
// a session key keeps short prompts together; distinct conversations still spread; a replica at
// max_in_flight is passed over; the index keeps to its budget; and a replica scaled away is
// forgotten at once.
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { Client } from "@connectrpc/connect";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type DeploymentService, InvokeApi } from "../../../gen/proto/modelforge/deployment/v1/deployment_pb.js";
import { EngineKind } from "../../../gen/proto/modelforge/jobs/v1/jobs_pb.js";
import { mulberry32 } from "../../../common/random.js";
import { writeTinyLlamaGguf } from "../../../scripts/gguf.js";
import { enrollTestNode, eventually } from "../../support/node.js";
import type { AgentProcess } from "../../support/process.js";
import { scrape } from "../../support/prometheus.js";
import { startTestServer, type TestServer } from "../../support/server.js";
import { deployReady, spawnServingAgent, storeArtifact } from "../../support/serving.js";
import { serviceClient } from "../../support/usage-load.js";

const repository = "acme/tiny";
const commit = "7".repeat(40);
/** 64 blocks of 128 characters: the prefix index's budget here, so the bound shows after a few dozen prompts. */
const budgetBlocks = 64;

let ts: TestServer;
let root: string;
const agents: AgentProcess[] = [];
let client: Client<typeof DeploymentService>;

beforeAll(async () => {
  root = mkdtempSync(join(tmpdir(), "mf-prefix-"));
  const model = join(root, "tiny.gguf");
  const { sha256 } = await writeTinyLlamaGguf(model, { contextLength: 2048 });
  ts = await startTestServer({
    MODELFORGE_HEARTBEAT_INTERVAL: "200ms",
    MODELFORGE_APPROVED_ROOTS: root,
    MODELFORGE_METRICS_ADDRESS: "127.0.0.1:0",
    MODELFORGE_PREFIX_INDEX_BUDGET: String(budgetBlocks * 128),
  });
  await ts.admin.createRuntimeProfile({ name: "tiny-cpu", engine: EngineKind.LLAMA_CPP, contextSize: 2048, threads: 1, parallel: 1 });
  await storeArtifact(ts.admin, { repository, commit, path: "tiny.gguf" }, model, sha256);
  for (let n = 0; n < 4; n++) {
    const node = await enrollTestNode(ts, `prefix-${n}`);
    agents.push(await spawnServingAgent(ts.admin, node, root));
  }
  await deployReady(ts.admin, {
    name: "chat",
    runtimeProfile: "tiny-cpu",
    repository,
    commit,
    targetRoot: root,
    replicas: 4,
    maxPerNode: 1,
    maxInFlight: 2,
  });
  const { secret } = await ts.admin.createServiceKey({ name: "prefix", deployments: ["chat"] });
  client = serviceClient(ts.url, ts.caPem, () => secret);
}, 240_000);

afterAll(async () => {
  await Promise.all(agents.map((a) => a.stop().catch(() => a.kill())));
  await ts?.stop();
  if (root) rmSync(root, { recursive: true, force: true });
});

interface Message {
  role: string;
  content: string;
}
interface Answered {
  replica: number;
  content: string;
  promptTokens: number;
  cachedTokens: number;
}

async function chat(messages: Message[], extra: Record<string, unknown> = {}): Promise<Answered> {
  const payload = Buffer.from(JSON.stringify({ messages, max_tokens: 8, temperature: 0, ...extra }));
  const res = await client.invoke({ deploymentId: "chat", api: InvokeApi.CHAT_COMPLETIONS, contentType: "application/json", payload });
  const body = JSON.parse(Buffer.from(res.payload).toString("utf8")) as {
    choices: { message: { content: string | null } }[];
    usage: { prompt_tokens: number; prompt_tokens_details?: { cached_tokens?: number } };
  };
  return {
    replica: res.replica,
    content: body.choices[0]!.message.content ?? "",
    promptTokens: body.usage.prompt_tokens,
    cachedTokens: body.usage.prompt_tokens_details?.cached_tokens ?? 0,
  };
}

/** Printable words from a seeded generator: the tiny model's vocabulary is one token per character. */
function words(chars: number, seed: number): string {
  const random = mulberry32(seed);
  let text = "";
  while (text.length < chars) text += `${Math.floor(random() * 1e9).toString(36)} `;
  return text.slice(0, chars);
}

const metrics = () => scrape(ts.server.metricsUrl!);
/** The replicas ("<revision>/<slot>") the prefix index holds blocks for, with their counts. */
async function indexed(): Promise<Map<string, number>> {
  const text = (await metrics()).text;
  const found = new Map<string, number>();
  for (const [, replica, value] of text.matchAll(/^modelforge_prefix_index_blocks\{deployment="chat",replica="([^"]+)"\} (\S+)$/gm)) {
    found.set(replica!, Number(value));
  }
  return found;
}

describe("prefix-aware routing", () => {
  it("keeps a conversation's turns on one replica of four, its cached tokens growing", async () => {
    const messages: Message[] = [{ role: "system", content: words(700, 1) }];
    const turns: Answered[] = [];
    for (let turn = 0; turn < 6; turn++) {
      messages.push({ role: "user", content: words(150, 100 + turn) });
      const answered = await chat(messages);
      turns.push(answered);
      messages.push({ role: "assistant", content: answered.content });
    }
    expect(new Set(turns.map((t) => t.replica)).size).toBe(1);
    for (let t = 1; t < turns.length; t++) {
      // All of the turn before was kept (less the one token llama.cpp evaluates again).
      expect(turns[t]!.cachedTokens).toBeGreaterThanOrEqual(turns[t - 1]!.promptTokens - 1);
      expect(turns[t]!.cachedTokens).toBeGreaterThan(turns[t - 1]!.cachedTokens);
    }
    const m = await metrics();
    expect(m.value("modelforge_prefix_routing_total", { deployment: "chat", decision: "matched" })).toBeGreaterThanOrEqual(5);
  });

  it("keeps a session (prompt_cache_key, else user) on one replica though its prompts share nothing", async () => {
    for (const key of [{ prompt_cache_key: "conversation-7" }, { user: "someone@example.com" }]) {
      const replicas = new Set<number>();
      for (let i = 0; i < 6; i++) replicas.add((await chat([{ role: "user", content: words(40, 500 + i) }], key)).replica);
      expect(replicas.size).toBe(1);
    }
    expect((await metrics()).value("modelforge_prefix_routing_total", { deployment: "chat", decision: "session" })).toBeGreaterThanOrEqual(
      10,
    );
  });

  it("spreads distinct conversations over the replicas", async () => {
    const replicas: number[] = [];
    for (let c = 0; c < 16; c++) {
      replicas.push(
        (
          await chat([
            { role: "system", content: words(700, 1000 + c) },
            { role: "user", content: "hello" },
          ])
        ).replica,
      );
    }
    // Power of two choices among idle replicas: each of 16 goes to a random one of four.
    expect(new Set(replicas).size).toBeGreaterThanOrEqual(3);
    expect((await metrics()).value("modelforge_prefix_routing_total", { deployment: "chat", decision: "no_match" })).toBeGreaterThanOrEqual(
      16,
    );
  });

  it("passes over the matching replica once it is at max_in_flight", async () => {
    const system = { role: "system", content: words(700, 2000) };
    const first = await chat([system, { role: "user", content: "start" }]);
    // Eight at once, one prefix: the replica that holds it takes two (its bound), the rest go on.
    const answers = await Promise.all(
      Array.from({ length: 8 }, (_, i) => chat([system, { role: "user", content: `question ${i}` }], { max_tokens: 48 })),
    );
    const onFirst = answers.filter((a) => a.replica === first.replica).length;
    expect(new Set(answers.map((a) => a.replica)).size).toBeGreaterThanOrEqual(3);
    expect(onFirst).toBeLessThan(8);
  });

  it("keeps the index within its budget", async () => {
    for (let i = 0; i < 40; i++) await chat([{ role: "user", content: words(128 * 4, 3000 + i) }]);
    const blocks = [...(await indexed()).values()].reduce((a, b) => a + b, 0);
    // Blocks are counted per replica they were sent to; each block here went to one.
    expect(blocks).toBeLessThanOrEqual(budgetBlocks);
    expect(blocks).toBeGreaterThan(budgetBlocks / 2);
  });

  it("forgets a replica scaled away at once", async () => {
    // Every replica holds something first.
    for (let c = 0; c < 40 && (await indexed()).size < 4; c++) await chat([{ role: "user", content: words(300, 4000 + c) }]);
    expect((await indexed()).size).toBe(4);
    await ts.admin.scaleDeployment({ deployment: "chat", replicas: 3 });
    await eventually(
      async () => (await ts.admin.getDeployment({ deployment: "chat" })).deployment!.replicas.length === 3,
      60_000,
      "3 replicas",
    );
    // No request since: the route change alone forgot it.
    await eventually(async () => (await indexed()).size === 3 || undefined, 10_000, "the index down to 3 replicas");
    const slots = [...(await indexed()).keys()].map((r) => r.split("/")[1]);
    expect(slots.sort()).toEqual(["0", "1", "2"]);
  });
});
