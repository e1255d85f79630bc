// A service key's last use, end to end: a real control plane (usage flushed every 200 ms) and a real
// agent process serving the tiny GGUF in llama.cpp. A key used through DeploymentService.Invoke and
// one used through the OpenAI API show the minute of their last request in ListServiceKeys once the
// usage is flushed, a key never used shows none, a later use moves it forward; `forge
// service-keys list` shows it in its LAST USED column ("never" when unset) and in --json.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { timestampMs } from "@bufbuild/protobuf/wkt";
import { Agent } from "undici";
import type { ServiceKey } from "../../gen/proto/modelforge/admin/v1/admin_pb.js";
import { writeTinyLlamaGguf } from "../../scripts/gguf.js";
import { startTestServer, testAdminKey, type TestServer } from "../support/server.js";
import { eventually, type TestNode } from "../support/node.js";
import type { AgentProcess } from "../support/process.js";
import { serveTiny, servingNode } from "../support/serving.js";
import { completion, openAiCompletion, serviceClient } from "../support/usage-load.js";
import { forgeAt } from "../support/forge.js";

const minuteMs = 60_000;
let ts: TestServer;
let root: string;
let node: TestNode;
let agent: AgentProcess;
let dispatcher: Agent;
const secrets: Record<string, string> = {};

beforeAll(async () => {
  root = mkdtempSync(join(tmpdir(), "mf-key-last-use-"));
  const path = join(root, "tiny.gguf");
  const env = { MODELFORGE_HEARTBEAT_INTERVAL: "200ms", MODELFORGE_APPROVED_ROOTS: root, MODELFORGE_USAGE_FLUSH: "200ms" };
  const [written, server] = await Promise.all([writeTinyLlamaGguf(path, { contextLength: 2048 }), startTestServer(env)]);
  ts = server;
  dispatcher = new Agent({ connect: { ca: ts.caPem } });
  ({ node, agent } = await servingNode(ts, root, "last-use", 2048));
  await serveTiny(ts.admin, { nodeId: node.nodeId, commit: "e".repeat(40), root, file: path, sha256: written.sha256 });
  for (const name of ["grpc", "openai", "idle"]) {
    secrets[name] = (await ts.admin.createServiceKey({ name, deployments: ["tiny"] })).secret;
  }
}, 240_000);

afterAll(async () => {
  await dispatcher?.close();
  await agent?.stop();
  await ts?.stop();
  if (root) rmSync(root, { recursive: true, force: true });
});

const keysByName = async () => new Map((await ts.admin.listServiceKeys({})).keys.map((k) => [k.name, k]));
const lastUseMs = (k: ServiceKey | undefined) => (k?.lastUsedAt === undefined ? undefined : timestampMs(k.lastUsedAt));

/** The key's last use once a flush has written one at or after `since` (epoch ms, a minute start). */
const lastUseFrom = (name: string, since: number) =>
  eventually(
    async () => {
      const at = lastUseMs((await keysByName()).get(name));
      return at !== undefined && at >= since ? at : undefined;
    },
    30_000,
    `key ${name} used since ${new Date(since).toISOString()}`,
  );

async function invokeWith(name: string): Promise<void> {
  const res = await serviceClient(ts.url, ts.caPem, () => secrets[name]!).invoke({ deploymentId: "tiny", payload: completion(2) });
  expect((JSON.parse(Buffer.from(res.payload).toString("utf8")) as { object: string }).object).toBe("text_completion");
}

const completeWith = (name: string) => openAiCompletion(ts.url, dispatcher, secrets[name]!, "tiny", "Hello");

const minuteOf = (ms: number) => Math.floor(ms / minuteMs) * minuteMs;

describe("a service key's last use", { timeout: 120_000 }, () => {
  it("is the minute of its latest request through Invoke or the OpenAI API, after the flush; unset for a key never used", async () => {
    const before = minuteOf(Date.now());
    expect(lastUseMs((await keysByName()).get("grpc"))).toBeUndefined();
    await invokeWith("grpc");
    await completeWith("openai");
    const after = Date.now();
    for (const name of ["grpc", "openai"]) {
      const at = await lastUseFrom(name, before);
      // A minute's start, the minute the request ended in.
      expect(at % minuteMs).toBe(0);
      expect(at).toBeLessThanOrEqual(after);
    }
    expect((await keysByName()).get("idle")?.lastUsedAt).toBeUndefined();
  });

  // Never moving back under a late flush of an older minute is held in test/database/usage-ledger.test.ts,
  // where the clock is a test's; here it moves forward with real requests only.
  it("moves forward with a later request and stays there while other keys are used", async () => {
    const first = await lastUseFrom("grpc", 0);
    await invokeWith("grpc");
    const now = minuteOf(Date.now());
    const second = await lastUseFrom("grpc", now);
    expect(second).toBeGreaterThanOrEqual(first);
    await completeWith("openai");
    await lastUseFrom("openai", now);
    expect(lastUseMs((await keysByName()).get("grpc"))).toBe(second);
  });

  it("shows in forge service-keys list: a LAST USED column, never when unset, and in --json", async () => {
    const forge = forgeAt(ts.url, ts.caPem, root, testAdminKey);
    const listed = await forge(["service-keys", "list"]);
    expect(listed.code, listed.stderr).toBe(0);
    const [header, ...rows] = listed.stdout.trimEnd().split("\n");
    expect(header).toMatch(/\bEXPIRES\s+LAST USED$/);
    const lastColumn = (name: string) => rows.find((r) => r.split(/\s+/)[2] === name)?.slice(header!.indexOf("LAST USED"));
    expect(lastColumn("idle")).toBe("never");
    expect(lastColumn("grpc")).toMatch(/^(just now|\d+s ago|\d+m(\d+s)? ago)$/);
    const json = await forge(["service-keys", "list", "--json"]);
    const keys = (JSON.parse(json.stdout) as { keys: { name: string; lastUsedAt?: string }[] }).keys;
    const byName = new Map(keys.map((k) => [k.name, k.lastUsedAt]));
    expect(byName.get("idle")).toBeUndefined();
    const grpc = (await keysByName()).get("grpc")!;
    expect(byName.get("grpc")).toBe(new Date(timestampMs(grpc.lastUsedAt!)).toISOString().replace(".000Z", "Z"));
  });
});
