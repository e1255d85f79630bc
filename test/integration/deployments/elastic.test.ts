// Elastic serving through the real server and a real agent process running the tiny GGUF: load
// above the target scales a deployment up to its max and back down after the delay with no request
// failed; an idle deployment goes to zero and the next request is held, kept alive, and answered
// once a replica loaded; a hold's bounds answer 503 with Retry-After; a client that leaves is
// dropped from the hold.
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { Client } from "@connectrpc/connect";
import { Code, ConnectError } from "@connectrpc/connect";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type DeploymentService, DeploymentState } from "../../../gen/proto/modelforge/deployment/v1/deployment_pb.js";
import { writeTinyLlamaGguf } from "../../../scripts/gguf.js";
import { eventually, type TestNode } from "../../support/node.js";
import { waitFor } from "../../support/wait.js";
import type { AgentProcess } from "../../support/process.js";
import { completion, serviceClient } from "../../support/usage-load.js";
import { startTestServer, type TestServer } from "../../support/server.js";
import { deployReady, servingNode, storeArtifact } from "../../support/serving.js";
import { openAiStream, postJson } from "../../support/http.js";
import { scrape } from "../../support/prometheus.js";
import { forgeAt } from "../../support/forge.js";
import { testAdminKey } from "../../support/server.js";

const repository = "acme/tiny";
const commit = "e".repeat(40);
const maxHeld = 3;

let ts: TestServer;
let root: string;
let node: TestNode;
let agent: AgentProcess | undefined;
let client: Client<typeof DeploymentService>;
let secret: string;

const record = async (name: string) => (await ts.admin.getDeployment({ deployment: name })).deployment!;
const ms = (n: number) => ({ seconds: BigInt(Math.floor(n / 1000)), nanos: (n % 1000) * 1e6 });
const completionsUrl = () => `${ts.url}/v1/completions`;

beforeAll(async () => {
  root = mkdtempSync(join(tmpdir(), "mf-elastic-"));
  const model = join(root, "tiny.gguf");
  const { sha256 } = await writeTinyLlamaGguf(model, { contextLength: 1024 });
  ts = await startTestServer({
    MODELFORGE_HEARTBEAT_INTERVAL: "200ms",
    MODELFORGE_APPROVED_ROOTS: root,
    MODELFORGE_AUTOSCALE_INTERVAL: "200ms",
    MODELFORGE_AUTOSCALE_WINDOW: "1s",
    // Well inside a tiny model's cold start (about 0.2 s), so a held stream sees a keep-alive first.
    MODELFORGE_COLD_START_KEEPALIVE: "50ms",
    MODELFORGE_COLD_START_MAX_HELD: String(maxHeld),
    MODELFORGE_METRICS_ADDRESS: "127.0.0.1:0",
  });
  ({ node, agent } = await servingNode(ts, root, "elastic-node", 1024));
  await storeArtifact(ts.admin, { repository, commit, path: "tiny.gguf" }, model, sha256);
  secret = (await ts.admin.createServiceKey({ name: "elastic", deployments: ["burst", "sleepy", "nowhere", "nowhere-fast"] })).secret;
  client = serviceClient(ts.url, ts.caPem, () => secret);
}, 180_000);

afterAll(async () => {
  await agent?.stop().catch(() => agent?.kill());
  await ts?.stop();
  if (root) rmSync(root, { recursive: true, force: true });
});

const spec = (name: string) => ({
  name,
  nodeId: node.nodeId,
  runtimeProfile: "tiny-cpu",
  repository,
  commit,
  targetRoot: root,
  maxInFlight: 8,
});

describe("autoscaling on requests in flight", () => {
  it("scales up to max under load above the target, then back to min after the delay, with no request failed", async () => {
    await deployReady(ts.admin, {
      ...spec("burst"),
      maxPerNode: 3,
      autoscaling: { minReplicas: 1, maxReplicas: 3, targetInFlight: 1, upscaleDelay: ms(500), downscaleDelay: ms(2_000) },
    });
    expect((await record("burst")).desiredReplicas).toBe(1);
    // Four callers, each with a request always in flight: four per replica against a target of one.
    let stop = false;
    let answered = 0;
    const failures: unknown[] = [];
    const worker = async () => {
      while (!stop) {
        await client
          .invoke({ deploymentId: "burst", contentType: "application/json", payload: completion(48) }, { timeoutMs: 60_000 })
          .then(
            () => (answered += 1),
            (err: unknown) => failures.push(err),
          );
      }
    };
    const workers = [worker(), worker(), worker(), worker()];
    try {
      // On a timeout, where each replica stood when last read.
      let last = "";
      await waitFor(
        async () => {
          const r = await record("burst");
          last = r.replicas.map((x) => `${DeploymentState[x.state]}${x.reason ? ` (${x.reason})` : ""}`).join(", ");
          return r.readyReplicas === 3 || undefined;
        },
        { timeout: 120_000, interval: 50, what: () => `burst at 3 ready replicas; its replicas: ${last === "" ? "none" : last}` },
      );
    } finally {
      stop = true;
      await Promise.all(workers);
    }
    const served = answered;
    // Idle now: back to min once the load stays under the target for the downscale delay.
    await eventually(
      async () => {
        const r = await record("burst");
        return (r.desiredReplicas === 1 && r.replicas.filter((x) => x.state === DeploymentState.READY).length === 1) || undefined;
      },
      60_000,
      "burst back at 1 replica",
    );
    expect(failures).toEqual([]);
    expect(served).toBeGreaterThan(0);
    const { scalingEvents } = await ts.admin.getDeployment({ deployment: "burst" });
    const byAutoscaler = scalingEvents.filter((e) => e.actor === "autoscaler");
    expect(byAutoscaler.some((e) => e.toReplicas > e.fromReplicas && /in flight per replica over 1 s, target 1$/.test(e.reason))).toBe(
      true,
    );
    expect(byAutoscaler.at(-1)).toMatchObject({ toReplicas: 1 });
    expect(byAutoscaler.at(-1)!.reason).toMatch(/in flight per replica over 1 s, target 1$/);
    expect(ts.logs()).toMatch(/scaled burst 1 → [23]: /);
  }, 300_000);
});

describe("forge deployments autoscale", () => {
  const forge = (args: string[]) => forgeAt(ts.url, ts.caPem, root, testAdminKey)(args);

  it("sets the bounds, shows them and the scaling history in get; scale turns autoscaling off", async () => {
    const set = await forge([
      "deployments",
      "autoscale",
      "burst",
      "--min",
      "1",
      "--max",
      "2",
      "--target-in-flight",
      "2",
      "--upscale-delay",
      "1m",
    ]);
    expect(set).toMatchObject({ code: 0, stderr: "" });
    expect(set.stdout).toBe(
      "Deployment burst autoscales: 1 to 2 replicas, target 2 in flight per replica (up after 60s, down after 10m; cold start timeout 2m). It wants 1 now.\n",
    );
    const got = await forge(["deployments", "get", "burst"]);
    expect(got.stdout).toMatch(/Autoscaling: +1 to 2 replicas, target 2 in flight per replica/);
    expect(got.stdout).toMatch(/\nScaling\n/);
    expect(got.stdout).toMatch(/autoscaler +[0-9.]+ in flight per replica over 1 s, target 1/);
    expect(got.stdout).toMatch(/break-glass +autoscaling set: min 1, max 2, target 2 in flight/);
    const wrong = await forge(["deployments", "autoscale", "burst", "--min", "3", "--max", "2"]);
    expect(wrong.code).not.toBe(0);
    expect(wrong.stderr).toMatch(/autoscaling\.max_replicas: at least min_replicas \(3\)/);
    expect((await forge(["deployments", "autoscale", "burst", "--min", "1"])).stderr).toMatch(/--max is required/);
    expect((await forge(["deployments", "scale", "burst", "--replicas", "1"])).code).toBe(0);
    expect((await forge(["deployments", "get", "burst"])).stdout).toMatch(/Autoscaling: +off/);
    expect((await ts.admin.getDeployment({ deployment: "burst" })).deployment!.autoscaling).toBeUndefined();
  }, 60_000);
});

describe("scale to zero, and back on the first request", () => {
  it("drains an idle deployment to zero; a held stream gets keep-alives, then its tokens after the load", async () => {
    // Loaded first with a long idle time, then a short one: a busy machine's slow load is not idleness.
    const sleepy = { minReplicas: 0, maxReplicas: 1, targetInFlight: 4 };
    await deployReady(ts.admin, { ...spec("sleepy"), autoscaling: { ...sleepy, scaleToZeroAfter: ms(3_600_000) } });
    await ts.admin.updateDeploymentScaling({ deployment: "sleepy", autoscaling: { ...sleepy, scaleToZeroAfter: ms(1_000) } });
    await eventually(
      async () => {
        const r = await record("sleepy");
        return (r.desiredReplicas === 0 && r.readyReplicas === 0 && r.deployment!.state === DeploymentState.UNLOADED) || undefined;
      },
      60_000,
      "sleepy scaled to zero and unloaded",
    );
    const started = performance.now();
    const { session, req } = openAiStream(ts.url, ts.caPem, secret);
    req.end(JSON.stringify({ model: "sleepy", prompt: "The quick brown fox", max_tokens: 8, temperature: 0, stream: true }));
    let text = "";
    let firstKeepAlive: number | undefined;
    let firstData: number | undefined;
    const status = await new Promise<number>((resolve) => req.on("response", (h) => resolve(Number(h[":status"]))));
    req.setEncoding("utf8");
    req.on("data", (chunk: string) => {
      text += chunk;
      if (firstKeepAlive === undefined && text.includes(": waiting for a replica to load")) firstKeepAlive = performance.now() - started;
      if (firstData === undefined && text.includes("data: {")) firstData = performance.now() - started;
    });
    await new Promise<void>((resolve) => req.on("end", () => resolve()));
    session.close();
    expect(status).toBe(200);
    expect(firstKeepAlive).toBeDefined();
    expect(firstData).toBeDefined();
    expect(firstKeepAlive!).toBeLessThan(firstData!);
    expect(text.trimEnd().endsWith("data: [DONE]")).toBe(true);
    expect(text.indexOf(": waiting")).toBeLessThan(text.indexOf("data: {"));
    expect(ts.logs()).toMatch(/cold start: a request is held while a replica loads/);
    const { scalingEvents, events } = await ts.admin.getDeployment({ deployment: "sleepy" });
    expect(scalingEvents.filter((e) => e.actor === "autoscaler").map((e) => [e.fromReplicas, e.toReplicas])).toEqual([
      [1, 0],
      [0, 1],
    ]);
    expect(scalingEvents.at(-1)!.reason).toBe("cold start: a request is held");
    // Its time to first byte is about the replica's load: from LOADING to READY in its history.
    const latest = (state: DeploymentState) => [...events].reverse().find((e) => e.toState === state)!;
    const loading = latest(DeploymentState.LOADING);
    const ready = latest(DeploymentState.READY);
    const loadMs = Number(ready.time!.seconds - loading.time!.seconds) * 1000 + (ready.time!.nanos - loading.time!.nanos) / 1e6;
    expect(firstData!).toBeGreaterThanOrEqual(loadMs);
    expect(firstData!).toBeLessThan(loadMs + 10_000);
    const metrics = await scrape(ts.server.metricsUrl!);
    expect(metrics.value("modelforge_cold_starts_total", { deployment: "sleepy" })).toBe(1);
    expect(metrics.value("modelforge_cold_start_seconds_count", { deployment: "sleepy" })).toBe(1);
    expect(metrics.value("modelforge_deployment_replicas", { deployment: "sleepy", state: "wanted" })).toBe(1);
    expect(metrics.value("modelforge_requests_held", { deployment: "sleepy" })).toBe(0);
  }, 180_000);
});

describe("the hold's bounds", () => {
  // A selector no node has: its replica stays PENDING, so its requests wait until a bound ends them.
  const unplaceable = (name: string, coldStartTimeoutMs: number) =>
    ts.admin.createDeployment({
      name,
      selector: { zone: "nowhere" },
      runtimeProfile: "tiny-cpu",
      repository,
      commit,
      targetRoot: root,
      autoscaling: { minReplicas: 0, maxReplicas: 1, coldStartTimeout: ms(coldStartTimeoutMs) },
    });
  const post = (model: string) =>
    postJson(completionsUrl(), ts.caPem, { model, prompt: "hi", max_tokens: 1 }, { authorization: `Bearer ${secret}` });
  const heldNow = async (name: string) => (await scrape(ts.server.metricsUrl!)).value("modelforge_requests_held", { deployment: name });

  it("past the cold-start timeout: 503 with Retry-After on the OpenAI API, unavailable on gRPC", async () => {
    await unplaceable("nowhere-fast", 1_000);
    const res = await post("nowhere-fast");
    expect(res.status).toBe(503);
    expect(res.headers["retry-after"]).toBe("5");
    expect(res.body).toMatchObject({ error: { code: "service_unavailable" } });
    expect((res.body as { error: { message: string } }).error.message).toMatch(/has no ready replica after waiting 1 s/);
    const err = await client.invoke({ deploymentId: "nowhere-fast", contentType: "application/json", payload: completion(1) }).then(
      () => undefined,
      (e: unknown) => ConnectError.from(e),
    );
    expect(err?.code).toBe(Code.Unavailable);
    // Its PENDING reason says why no node fits, and why evicting a replica of another would not help.
    const pending = (await record("nowhere-fast")).replicas[0]!;
    expect(pending.state).toBe(DeploymentState.PENDING);
    expect(pending.reason).toMatch(/^no node fits: .*lacks? labels \{"zone":"nowhere"\}/);
  }, 60_000);

  it("past the count: refused at once; a client that leaves frees its place", async () => {
    await unplaceable("nowhere", 60_000);
    // maxHeld streams held, each seen kept alive.
    const streams = Array.from({ length: maxHeld }, () => {
      const s = openAiStream(ts.url, ts.caPem, secret);
      s.req.end(JSON.stringify({ model: "nowhere", prompt: "hi", max_tokens: 1, stream: true }));
      const alive = new Promise<void>((resolve) => {
        s.req.setEncoding("utf8");
        s.req.on("data", (c: string) => c.includes(": waiting") && resolve());
      });
      return { ...s, alive };
    });
    await Promise.all(streams.map((s) => s.alive));
    expect(await heldNow("nowhere")).toBe(maxHeld);
    const refused = await post("nowhere");
    expect(refused.status).toBe(503);
    expect(refused.headers["retry-after"]).toBe("5");
    expect((refused.body as { error: { message: string } }).error.message).toMatch(/already has 3 requests waiting for a replica to load/);
    // One leaves: it is dropped from the hold, and its place is free for the next.
    streams[0]!.req.close();
    streams[0]!.session.close();
    await eventually(async () => (await heldNow("nowhere")) === maxHeld - 1 || undefined, 30_000, "the leaver dropped from the hold");
    const next = openAiStream(ts.url, ts.caPem, secret);
    next.req.end(JSON.stringify({ model: "nowhere", prompt: "hi", max_tokens: 1, stream: true }));
    const status = await new Promise<number>((resolve) => next.req.on("response", (h) => resolve(Number(h[":status"]))));
    expect(status).toBe(200);
    await eventually(async () => (await heldNow("nowhere")) === maxHeld || undefined, 30_000, "the next one held");
    // The rest leave by closing their connections at once (a graceful close would wait for the streams).
    for (const s of [...streams.slice(1), next]) s.session.destroy();
    await eventually(async () => (await heldNow("nowhere")) === 0 || undefined, 30_000, "every leaver dropped");
  }, 60_000);
});

describe("forge nodes label", () => {
  let second: { node: TestNode; agent: AgentProcess } | undefined;
  afterAll(async () => {
    await second?.agent.stop().catch(() => second?.agent.kill());
  });
  const forge = (args: string[]) => forgeAt(ts.url, ts.caPem, root, testAdminKey)(args);
  const placedOn = async (name = "zoned") =>
    (await record(name)).replicas.filter((r) => r.state === DeploymentState.READY).map((r) => r.nodeId);

  it("moves a replica off a node that no longer matches its selector, to one that now does", async () => {
    second = await servingNode(ts, root, "elastic-node-2", 1024);
    const set = await forge(["nodes", "label", node.nodeId, "zone=a", "pool=cpu"]);
    expect(set).toMatchObject({ code: 0, stderr: "" });
    expect(set.stdout).toMatch(/has the labels pool=cpu,zone=a|has the labels zone=a,pool=cpu/);
    await deployReady(ts.admin, { ...spec("zoned"), nodeId: "", selector: { zone: "a" } });
    expect(await placedOn()).toEqual([node.nodeId]);
    expect((await forge(["nodes", "label", second.node.nodeId, "zone=a"])).code).toBe(0);
    expect((await forge(["nodes", "label", node.nodeId, "zone-"])).stdout).toMatch(/has the labels pool=cpu\.$/m);
    await eventually(
      async () => ((await placedOn()).join() === second!.node.nodeId ? true : undefined),
      90_000,
      "zoned's replica moved to the second node",
    );
    const { events } = await ts.admin.getDeployment({ deployment: "zoned" });
    expect(events.some((e) => e.reason.startsWith(`node ${node.nodeId} no longer has the labels zone=a`))).toBe(true);
    const audit = await ts.admin.listAuditEvents({ targetId: node.nodeId });
    expect(audit.events.find((e) => e.action === "node.updated" && e.details.labels === '{"pool":"cpu"}')?.details.labelsBefore).toBe(
      '{"pool":"cpu","zone":"a"}',
    );
    expect((await forge(["nodes", "label", node.nodeId, "=x"])).stderr).toMatch(/expected KEY=VALUE to set a label or KEY- to remove one/);
  }, 180_000);

  it("places a deployment with neither node nor selector on any node that fits", async () => {
    await deployReady(ts.admin, { ...spec("anywhere"), nodeId: "" });
    expect(await placedOn("anywhere")).toHaveLength(1);
  }, 120_000);
});
