// More models than fit: eight autoscaled deployments of the tiny GGUF on three real agents whose
// model memory holds two replicas each. Requests come in a round robin; every one is answered, a
// deployment not resident after a cold start for which an idle replica of another is evicted, and
// nothing is evicted while it serves.
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, expect, it } from "vitest";
import { DeploymentState } from "../../../gen/proto/modelforge/deployment/v1/deployment_pb.js";
import { writeTinyLlamaGguf } from "../../../scripts/gguf.js";
import { enrollTestNode, eventually } from "../../support/node.js";
import type { AgentProcess } from "../../support/process.js";
import { startTestServer, type TestServer } from "../../support/server.js";
import { spawnServingAgent, storeArtifact } from "../../support/serving.js";
import { postJson } from "../../support/http.js";
import { scrape } from "../../support/prometheus.js";
import { EngineKind } from "../../../gen/proto/modelforge/jobs/v1/jobs_pb.js";

const repository = "acme/tiny";
const commit = "9".repeat(40);
const names = Array.from({ length: 8 }, (_, i) => `m${i + 1}`);

let ts: TestServer;
let root: string;
const agents: AgentProcess[] = [];
let secret: string;

beforeAll(async () => {
  root = mkdtempSync(join(tmpdir(), "mf-eviction-"));
  const model = join(root, "tiny.gguf");
  const { sha256 } = await writeTinyLlamaGguf(model, { contextLength: 1024 });
  ts = await startTestServer({
    MODELFORGE_HEARTBEAT_INTERVAL: "200ms",
    MODELFORGE_TELEMETRY_INTERVAL: "200ms",
    MODELFORGE_APPROVED_ROOTS: root,
    MODELFORGE_AUTOSCALE_INTERVAL: "200ms",
    MODELFORGE_AUTOSCALE_WINDOW: "1s",
    MODELFORGE_EVICT_IDLE_AFTER: "1s",
    MODELFORGE_METRICS_ADDRESS: "127.0.0.1:0",
  });
  await ts.admin.createRuntimeProfile({ name: "tiny-cpu", engine: EngineKind.LLAMA_CPP, contextSize: 1024, threads: 1, parallel: 1 });
  await storeArtifact(ts.admin, { repository, commit, path: "tiny.gguf" }, model, sha256);
  // A tiny replica needs about 260 MiB as placement prices it (256 MiB of fixed margin): two fit in 600.
  for (let n = 0; n < 3; n++) {
    const node = await enrollTestNode(ts, `evict-${n}`);
    agents.push(await spawnServingAgent(ts.admin, node, root, { MODELFORGE_AGENT_MODEL_MEMORY: "600MiB" }));
  }
  secret = (await ts.admin.createServiceKey({ name: "rr", deployments: names })).secret;
}, 180_000);

afterAll(async () => {
  await Promise.all(agents.map((a) => a.stop().catch(() => a.kill())));
  await ts?.stop();
  if (root) rmSync(root, { recursive: true, force: true });
});

const ready = async (name: string) => (await ts.admin.getDeployment({ deployment: name })).deployment!.readyReplicas;

it("serves eight deployments on room for six: every request answered, idle replicas evicted, none that serves", async () => {
  for (const name of names) {
    await ts.admin.createDeployment({
      name,
      runtimeProfile: "tiny-cpu",
      repository,
      commit,
      targetRoot: root,
      autoscaling: { minReplicas: 0, maxReplicas: 1, targetInFlight: 4, scaleToZeroAfter: { seconds: 3600n, nanos: 0 } },
    });
  }
  // Six fit; the seventh and eighth evict two of the first once those are idle.
  await eventually(
    async () => {
      const counts = await Promise.all(names.map(ready));
      return counts.reduce((a, b) => a + b, 0) === 6 || undefined;
    },
    120_000,
    "six replicas ready",
  );
  const windows = new Map<string, [number, number][]>(names.map((n) => [n, []]));
  const statuses: number[] = [];
  for (let round = 0; round < 2; round++) {
    for (const name of names) {
      const start = Date.now();
      const res = await postJson(
        `${ts.url}/v1/completions`,
        ts.caPem,
        { model: name, prompt: "The quick brown fox", max_tokens: 2, temperature: 0 },
        { authorization: `Bearer ${secret}` },
      );
      statuses.push(res.status);
      windows.get(name)!.push([start, Date.now()]);
    }
  }
  expect(statuses).toEqual(Array(16).fill(200));
  const evictions = (
    await Promise.all(
      names.map(async (name) =>
        (
          await ts.admin.getDeployment({ deployment: name })
        ).scalingEvents
          .filter((e) => e.reason.startsWith("evicted from node"))
          .map((e) => ({ name, at: Number(e.time!.seconds) * 1000 + e.time!.nanos / 1e6, reason: e.reason })),
      ),
    )
  ).flat();
  // At least the two at creation and one per cold start of the round robin's deployments not resident.
  expect(evictions.length).toBeGreaterThanOrEqual(4);
  for (const e of evictions) {
    expect(e.reason).toMatch(/to make room for m\d: idle \d+ s, loads in \d+\.\d s, priority 0$/);
    // Nothing evicted while it served: no request of the victim's was in flight then.
    expect(windows.get(e.name)!.some(([s, t]) => s <= e.at && e.at <= t)).toBe(false);
  }
  expect((await scrape(ts.server.metricsUrl!)).value("modelforge_evictions_total", { reason: "make_room" })).toBe(evictions.length);
  // Never more than two replicas on a node: six ready at most.
  const counts = await Promise.all(names.map(ready));
  expect(counts.reduce((a, b) => a + b, 0)).toBeLessThanOrEqual(6);
  // A replica no eviction can help (a selector no node has) says why in its PENDING reason.
  await ts.admin.createDeployment({
    name: "stranded",
    selector: { zone: "nowhere" },
    runtimeProfile: "tiny-cpu",
    repository,
    commit,
    targetRoot: root,
    autoscaling: { minReplicas: 1, maxReplicas: 1 },
  });
  await eventually(
    async () => {
      const reason = (await ts.admin.getDeployment({ deployment: "stranded" })).deployment!.replicas[0]?.reason ?? "";
      return (
        /; (evicting any of \d+ idle replicas? would not make room on a node that fits|none of \d+ autoscaled replicas? of this priority or lower can be evicted)/.test(
          reason,
        ) || undefined
      );
    },
    30_000,
    "stranded's reason about eviction",
  );
  const states = await Promise.all(names.map(async (n) => (await ts.admin.getDeployment({ deployment: n })).deployment!.deployment!.state));
  expect(states.every((s) => s !== DeploymentState.FAILED)).toBe(true);
}, 600_000);
