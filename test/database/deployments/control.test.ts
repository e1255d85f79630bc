// Deployments as desired state, end to end through a real server and an in-process agent whose
// deployment handlers are scripted (the real runtime handlers are tested with llama.cpp elsewhere):
// the controller's jobs, their order, the states and history operators see, revision changes
// without a gap, drain, unload, delete, failures, and reloading after the agent restarts.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createHash, randomUUID } from "node:crypto";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Code } from "@connectrpc/connect";
import { DeploymentDesiredState } from "../../../gen/proto/modelforge/admin/v1/admin_pb.js";
import { DeploymentState } from "../../../gen/proto/modelforge/deployment/v1/deployment_pb.js";
import { EngineKind, JobFailureCode, type JobSpec } from "../../../gen/proto/modelforge/jobs/v1/jobs_pb.js";
import { CapabilityRegistry, JobFailureError } from "../../../agent/jobs/index.js";
import { startTestServer, type TestServer } from "../../support/server.js";
import { enrollTestNode, eventually, type TestNode } from "../../support/node.js";
import { startAgent, type InProcessAgent } from "../../support/agent.js";
import { deploymentRoutes } from "../../../server/deployments/routes.js";
import { PassThrough, Writable } from "node:stream";
import { writeFileSync } from "node:fs";
import { runCli } from "../../../cli/cli.js";
import { testAdminKey } from "../../support/server.js";
import { telemetryArrived } from "../../support/serving.js";
import { tinyLlamaGguf } from "../../../scripts/gguf.js";

const repository = "acme/tiny";
const commitA = "a".repeat(40);
const commitB = "b".repeat(40);
const commitBroken = "c".repeat(40);

let ts: TestServer;
let root: string;
let node: TestNode;
let agent: InProcessAgent;
/** Every deployment step the agent ran, in order: "<capability> <deployment>#<revision>". */
const calls: string[] = [];
/** While set, drains wait for it (an invoke in flight). */
let drainGate: Promise<void> | undefined;

const sha256 = (b: Buffer) => createHash("sha256").update(b).digest("hex");

async function push(commit: string, path: string, content: Buffer) {
  const res = await ts.admin.uploadArtifactChunk({
    repository,
    commit,
    path,
    sizeBytes: BigInt(content.length),
    sha256: sha256(content),
    offset: 0n,
    data: content,
  });
  expect(res.complete).toBe(true);
}

function registry(): CapabilityRegistry {
  const note = (cap: string, id: string, revision: bigint) => calls.push(`${cap} ${id}#${revision}`);
  const registry = new CapabilityRegistry();
  registry.engines = ["llama.cpp"];
  return registry
    .register("artifact.acquire.v1", async (spec: JobSpec) => {
      if (spec.kind.case !== "artifactAcquire") throw new Error("wrong spec");
      calls.push(`acquire ${spec.kind.value.commit.slice(0, 1)}`);
      const v = spec.kind.value;
      // The verified inventory the server checks against the spec.
      return {
        result: {
          case: "artifactAcquire",
          value: { path: join(v.targetRoot, repository, v.commit), files: v.files, bytesWritten: v.files[0]!.sizeBytes },
        },
      };
    })
    .register("deployment.load.v1", async (spec: JobSpec) => {
      if (spec.kind.case !== "deploymentLoad") throw new Error("wrong spec");
      const v = spec.kind.value;
      note("load", v.deploymentId, v.revision);
      if (v.artifacts.some((a) => a.path.includes(commitBroken))) {
        throw new JobFailureError(JobFailureCode.MODEL_LOAD_FAILED, "not a GGUF file");
      }
      expect(v.profile?.engine).toBe(EngineKind.LLAMA_CPP);
      return { result: { case: "deploymentLoad", value: { runtimeId: `rt-${v.revision}`, revision: v.revision } } };
    })
    .register("deployment.drain.v1", async (spec: JobSpec) => {
      if (spec.kind.case !== "deploymentDrain") throw new Error("wrong spec");
      note("drain", spec.kind.value.deploymentId, spec.kind.value.revision);
      await drainGate;
      return { result: { case: "deploymentDrain", value: { completedInFlight: 1 } } };
    })
    .register("deployment.health.v1", async (spec: JobSpec) => {
      if (spec.kind.case !== "deploymentHealth") throw new Error("wrong spec");
      const revision = spec.kind.value.revision;
      if (revision === 1n) throw new JobFailureError(JobFailureCode.NOT_FOUND, "no such runtime");
      return { result: { case: "deploymentHealth", value: { healthy: true, detail: `rt-${revision} answers` } } };
    })
    .register("deployment.unload.v1", async (spec: JobSpec) => {
      if (spec.kind.case !== "deploymentUnload") throw new Error("wrong spec");
      note("unload", spec.kind.value.deploymentId, spec.kind.value.revision);
      return { result: { case: "deploymentUnload", value: { freedBytes: 1n } } };
    });
}

const get = async (name: string) => (await ts.admin.getDeployment({ deployment: name }))!;
const stateOf = async (name: string) => (await get(name)).deployment!.deployment!.state;
const until = (name: string, state: DeploymentState, what = `${name} ${DeploymentState[state]}`) =>
  eventually(async () => ((await stateOf(name)) === state ? true : undefined), 30_000, what);

beforeAll(async () => {
  root = mkdtempSync(join(tmpdir(), "mf-deploy-root-"));
  ts = await startTestServer({ MODELFORGE_APPROVED_ROOTS: root, MODELFORGE_HEARTBEAT_INTERVAL: "200ms" });
  node = await enrollTestNode(ts, "gpu-deploy");
  agent = await startAgent(node, { registry: registry() });
  await eventually(
    async () => (await ts.admin.getNode({ nodeId: node.nodeId })).node!.capabilities.includes("deployment.load.v1"),
    20_000,
    "advertised",
  );
  await ts.admin.createRuntimeProfile({ name: "tiny-cpu", engine: EngineKind.LLAMA_CPP, contextSize: 1024, threads: 1 });
  await ts.admin.createRuntimeProfile({ name: "tiny-cpu-2t", engine: EngineKind.LLAMA_CPP, contextSize: 1024, threads: 2 });
  await ts.admin.createRuntimeProfile({ name: "remote", engine: EngineKind.OPENAI_HTTP });
  // Real GGUF headers: placement prices a model by the estimate made from its header at push.
  for (const [i, c] of [commitA, commitB, commitBroken].entries()) await push(c, "model.gguf", tinyLlamaGguf({ seed: i + 1 }).bytes);
  await telemetryArrived(ts.admin, node.nodeId);
}, 60_000);

afterAll(async () => {
  await agent?.stop();
  await ts?.stop();
  if (root) rmSync(root, { recursive: true, force: true });
});

// In order: each test goes on with the deployment "chat" the first one created, and the agent.
describe.sequential("deployments through a real server", () => {
  it("creates a deployment, acquires then loads it under its ordering key, and shows READY with history", async () => {
    const created = await ts.admin.createDeployment({
      name: "chat",
      nodeId: node.nodeId,
      runtimeProfile: "tiny-cpu",
      repository,
      commit: commitA,
    });
    const rec = created.deployment!;
    expect(rec.desired).toBe(DeploymentDesiredState.SERVING);
    expect(rec.deployment!.revision).toBe(1n);
    expect(rec.targetRoot).toBe(root);
    await until("chat", DeploymentState.READY);
    const got = await get("chat");
    const id = got.deployment!.deployment!.id;
    expect(got.deployment!.instances[0]).toMatchObject({ revision: 1n, state: DeploymentState.READY, runtimeId: "rt-1", step: "" });
    expect(got.events.map((e) => [DeploymentState[e.fromState], DeploymentState[e.toState]])).toEqual([
      ["UNSPECIFIED", "PENDING"],
      ["PENDING", "LOADING"],
      ["LOADING", "READY"],
    ]);
    expect(got.events[1]!.reason).toBe(`placed on node ${node.nodeId}`);
    expect(got.deployment!.replicas).toEqual([
      expect.objectContaining({ index: 0, revision: 1n, nodeId: node.nodeId, state: DeploymentState.READY, inFlight: 0 }),
    ]);
    expect(got.deployment!).toMatchObject({ desiredReplicas: 1, readyReplicas: 1, maxPerNode: 1 });
    expect(calls.filter((c) => c.includes(id) || c.startsWith("acquire"))).toEqual(["acquire a", `load ${id}#1`]);
    const jobs = (await ts.admin.listJobs({ orderingKey: id })).jobs;
    expect(jobs.map((j) => j.capability).sort()).toEqual(["artifact.acquire.v1", "deployment.load.v1"]);
    // The load's lease carried the stored profile and the acquired paths.
    const load = jobs.find((j) => j.capability === "deployment.load.v1")!;
    expect(load.spec!.kind.case).toBe("deploymentLoad");
    if (load.spec!.kind.case === "deploymentLoad") {
      expect(load.spec!.kind.value.profile?.contextSize).toBe(1024);
      expect(load.spec!.kind.value.artifacts[0]!.path).toBe(join(root, repository, commitA, "model.gguf"));
    }
    const routes = deploymentRoutes(ts.server.db.prisma, ts.server.db.direct, { onChange: () => () => undefined });
    expect(await routes.find("chat")).toMatchObject({ deploymentId: id, phase: "READY", maxInFlight: 8, invokeTimeoutMs: 60_000 });
    // The runtime that serves it: a restarted replica is a new runtime, which prefix routing tells apart.
    const runtimeId = (await ts.admin.getDeployment({ deployment: "chat" })).deployment!.instances[0]!.runtimeId;
    expect(runtimeId).not.toBe("");
    expect((await routes.find(id))!.ready).toEqual([
      { revision: 1n, replica: 0, nodeId: node.nodeId, phase: "READY", engine: "llama.cpp", embeddings: false, runtimeId },
    ]);
    expect(await routes.find("no-such")).toBeUndefined();
    // The request path's read (one statement on the driver) builds what the listing (Prisma) does.
    const byName = await routes.find("chat");
    expect(await routes.find(id.toUpperCase())).toEqual(byName);
    expect(await routes.list(["chat"], 0, 10)).toEqual([byName]);
    const listed = await ts.admin.listDeploymentRecords({});
    expect(listed.deployments.map((d) => d.deployment!.name)).toContain("chat");
  });

  it("refuses what cannot be deployed, typed", async () => {
    const base = { name: "x", nodeId: node.nodeId, runtimeProfile: "tiny-cpu", repository, commit: commitA };
    for (const [req, code, text] of [
      [{ ...base, name: "chat" }, Code.AlreadyExists, "exists"],
      [{ ...base, name: "Bad_Name" }, Code.InvalidArgument, "name:"],
      [{ ...base, runtimeProfile: "nope" }, Code.NotFound, 'runtime profile "nope" not found'],
      [{ ...base, commit: "d".repeat(40) }, Code.FailedPrecondition, "no files in the artifact store"],
      [{ ...base, selector: { zone: "a" } }, Code.InvalidArgument, "give node_id or selector, not both"],
      [{ ...base, replicas: 2, autoscaling: { maxReplicas: 2 } }, Code.InvalidArgument, "give replicas or autoscaling, not both"],
      [
        { ...base, autoscaling: { minReplicas: 2, maxReplicas: 1 } },
        Code.InvalidArgument,
        "autoscaling.max_replicas: at least min_replicas (2)",
      ],
      [{ ...base, nodeId: "00000000-0000-4000-8000-000000000000" }, Code.NotFound, "node 00000000-0000-4000-8000-000000000000 not found"],
      [{ ...base, targetRoot: "/etc" }, Code.InvalidArgument, "approved roots"],
      [{ ...base, maxInFlight: 5000 }, Code.InvalidArgument, "max_in_flight"],
      [{ ...base, replicas: 65 }, Code.InvalidArgument, "replicas: from 0 to 64"],
      [{ ...base, maxPerNode: 65 }, Code.InvalidArgument, "max_per_node"],
    ] as const) {
      await expect(ts.admin.createDeployment(req), JSON.stringify(req)).rejects.toMatchObject({
        code,
        message: expect.stringContaining(text),
      });
    }
    await expect(ts.admin.getDeployment({ deployment: "nope" })).rejects.toMatchObject({ code: Code.NotFound });
    // What fits nowhere is created and waits PENDING, saying why with the numbers.
    for (const [name, over, reason] of [
      ["no-pool", { nodeId: "", selector: { pool: "none" } }, 'no node fits: 1 online; 1 lacks labels {"pool":"none"}'],
      ["no-engine", { runtimeProfile: "remote" }, `no node fits: node ${node.nodeId}: lacks engine openai-http`],
    ] as const) {
      const made = await ts.admin.createDeployment({ ...base, ...over, name });
      expect(made.deployment!.deployment!).toMatchObject({ state: DeploymentState.PENDING, failureReason: reason });
      expect(made.deployment!.replicas[0]).toMatchObject({ state: DeploymentState.PENDING, nodeId: "", reason });
      await ts.admin.deleteDeployment({ deployment: name });
    }
  });

  it("changes revision: the new one loads before the old one drains, and it is READY all along", async () => {
    const id = (await get("chat")).deployment!.deployment!.id;
    let notReady = 0;
    let watching = true;
    const watch = (async () => {
      while (watching) if ((await stateOf("chat")) !== DeploymentState.READY) notReady++;
    })();
    const res = await ts.admin.updateDeploymentRevision({ deployment: "chat", commit: commitB, runtimeProfile: "tiny-cpu-2t" });
    expect(res.deployment!.deployment!.revision).toBe(2n);
    await eventually(
      async () => {
        const d = (await get("chat")).deployment!;
        return d.instances.find((i) => i.revision === 1n)?.state === DeploymentState.UNLOADED ? d : undefined;
      },
      30_000,
      "revision 1 unloaded",
    );
    watching = false;
    await watch;
    expect(notReady).toBe(0);
    const mine = calls.filter((c) => c.includes(id));
    expect(mine.slice(-3)).toEqual([`load ${id}#2`, `drain ${id}#1`, `unload ${id}#1`]);
    const d = (await get("chat")).deployment!;
    expect(d.instances[0]).toMatchObject({ revision: 2n, state: DeploymentState.READY, runtimeProfile: "tiny-cpu-2t", commit: commitB });
    await expect(ts.admin.updateDeploymentRevision({ deployment: "chat", commit: commitB })).rejects.toMatchObject({
      code: Code.InvalidArgument,
    });
  });

  it("a revision that fails to load leaves the old one serving, with the reason shown", async () => {
    await ts.admin.updateDeploymentRevision({ deployment: "chat", commit: commitBroken });
    const d = await eventually(
      async () => {
        const r = (await get("chat")).deployment!;
        return r.instances.find((i) => i.revision === 3n)?.state === DeploymentState.FAILED ? r : undefined;
      },
      30_000,
      "revision 3 failed",
    );
    expect(d.instances.find((i) => i.revision === 3n)!.reason).toContain("not a GGUF file");
    expect(d.deployment!.state).toBe(DeploymentState.READY);
    expect(d.instances.find((i) => i.revision === 2n)!.state).toBe(DeploymentState.READY);
  });

  it("drain stops serving at once (the RPC answers DRAINING), waits for the drain, then unloads", async () => {
    await ts.admin.createDeployment({ name: "drainme", nodeId: node.nodeId, runtimeProfile: "tiny-cpu", repository, commit: commitA });
    await until("drainme", DeploymentState.READY);
    let release!: () => void;
    drainGate = new Promise((r) => (release = r));
    const drained = await ts.admin.drainDeployment({ deployment: "drainme" });
    expect(drained.deployment!.desired).toBe(DeploymentDesiredState.DRAINED);
    expect(drained.deployment!.deployment!.state).toBe(DeploymentState.DRAINING);
    // The relay's view: no instance takes new invokes from the moment the RPC answered.
    const routes = deploymentRoutes(ts.server.db.prisma, ts.server.db.direct, { onChange: () => () => undefined });
    expect(await routes.find("drainme")).toMatchObject({ phase: "DRAINING", ready: [] });
    const id = drained.deployment!.deployment!.id;
    await eventually(async () => (calls.includes(`drain ${id}#1`) ? true : undefined), 20_000, "drain job running");
    expect(await stateOf("drainme")).toBe(DeploymentState.DRAINING);
    release();
    drainGate = undefined;
    await until("drainme", DeploymentState.UNLOADED);
    expect(calls.filter((c) => c.includes(id)).slice(-2)).toEqual([`drain ${id}#1`, `unload ${id}#1`]);
    await expect(ts.admin.updateDeploymentRevision({ deployment: "drainme", commit: commitB })).rejects.toMatchObject({
      code: Code.FailedPrecondition,
    });
  });

  it("unload skips the drain; delete removes the record once nothing runs", async () => {
    await ts.admin.createDeployment({ name: "gone", nodeId: node.nodeId, runtimeProfile: "tiny-cpu", repository, commit: commitA });
    await until("gone", DeploymentState.READY);
    const id = (await get("gone")).deployment!.deployment!.id;
    await ts.admin.unloadDeployment({ deployment: "gone" });
    await until("gone", DeploymentState.UNLOADED);
    expect(calls.filter((c) => c.includes(id))).toEqual([`load ${id}#1`, `unload ${id}#1`]);
    const routes = deploymentRoutes(ts.server.db.prisma, ts.server.db.direct, { onChange: () => () => undefined });
    expect(await routes.find(id)).toMatchObject({ name: "gone", phase: "UNLOADED", ready: [] });
    await ts.admin.deleteDeployment({ deployment: "gone" });
    await eventually(
      async () =>
        ts.admin.getDeployment({ deployment: "gone" }).then(
          () => undefined,
          (err) => (err.code === Code.NotFound ? true : undefined),
        ),
      20_000,
      "deleted",
    );
    expect(await routes.find(id)).toBeUndefined();
    // A record kept while its delete is carried out routes nothing either.
    const kept = randomUUID();
    await ts.server.db.prisma.deployment.create({ data: { id: kept, name: "being-deleted", desired: "deleted" } });
    expect(await routes.find("being-deleted")).toBeUndefined();
    expect(await routes.find(kept)).toBeUndefined();
    await ts.server.db.prisma.deployment.delete({ where: { id: kept } });
    const audit = await ts.admin.listAuditEvents({ targetId: id });
    expect(audit.events.map((e) => e.action)).toEqual(
      expect.arrayContaining(["deployment.created", "deployment.unload_requested", "deployment.delete_requested", "deployment.removed"]),
    );
  });

  it("a revision keeps its model file while the new commit holds it, else loads the new commit's single GGUF", async () => {
    const [d1, d2, d3] = ["d", "e", "f"].map((c) => c.repeat(40)) as [string, string, string];
    const readme = Buffer.from("# model\n");
    for (const [commit, paths] of [
      [d1, ["README.md", "v1.gguf"]],
      [d2, ["README.md", "v1.gguf", "v2.gguf"]],
      [d3, ["README.md", "v2.gguf"]],
    ] as const) {
      for (const [i, path] of paths.entries())
        await push(commit, path, path === "README.md" ? readme : tinyLlamaGguf({ seed: 10 + i }).bytes);
    }
    await ts.admin.createDeployment({ name: "files", nodeId: node.nodeId, runtimeProfile: "tiny-cpu", repository, commit: d1 });
    await until("files", DeploymentState.READY);
    const id = (await get("files")).deployment!.deployment!.id;
    const ready = (revision: bigint) =>
      eventually(
        async () => (await get("files")).deployment!.instances.find((i) => i.revision === revision)?.state === DeploymentState.READY,
        30_000,
        `files revision ${revision} READY`,
      );
    await ts.admin.updateDeploymentRevision({ deployment: "files", commit: d2 });
    await ready(2n);
    await expect(ts.admin.updateDeploymentRevision({ deployment: "files", modelFile: "v3.gguf" })).rejects.toMatchObject({
      code: Code.InvalidArgument,
      rawMessage: expect.stringContaining('model_file: "v3.gguf" is not a file of the commit'),
    });
    await ts.admin.updateDeploymentRevision({ deployment: "files", commit: d3 });
    await ready(3n);
    const r = (await get("files")).deployment!;
    expect(r.modelFile).toBe("v2.gguf");
    expect(r.instances.map((i) => [i.revision, i.commit[0], i.modelFile])).toEqual([
      [3n, "f", "v2.gguf"],
      [2n, "e", "v1.gguf"],
      [1n, "d", "v1.gguf"],
    ]);
    // Each load's lease names the resolved path on the node, among the commit's artifacts.
    const loads = (await ts.admin.listJobs({ orderingKey: id })).jobs.flatMap((j) =>
      j.spec?.kind.case === "deploymentLoad" ? [j.spec.kind.value] : [],
    );
    expect(loads.map((l) => [l.revision, l.modelFile, l.artifacts.length]).sort((a, b) => Number(a[0]) - Number(b[0]))).toEqual([
      [1n, join(root, repository, d1, "v1.gguf"), 2],
      [2n, join(root, repository, d2, "v1.gguf"), 3],
      [3n, join(root, repository, d3, "v2.gguf"), 2],
    ]);
    await ts.admin.deleteDeployment({ deployment: "files" });
  });

  it("an agent restarted without its runtimes gets the ready deployment loaded again", async () => {
    const id = (await get("chat")).deployment!.deployment!.id;
    const loadsBefore = calls.filter((c) => c === `load ${id}#2`).length;
    await agent.stop();
    agent = await startAgent(node, { registry: registry() });
    await eventually(async () => (calls.filter((c) => c === `load ${id}#2`).length > loadsBefore ? true : undefined), 30_000, "reloaded");
    await until("chat", DeploymentState.READY);
    const events = (await get("chat")).events;
    expect(events.some((e) => e.reason.includes("no longer holds the runtime"))).toBe(true);
  });

  it("checks the health of each loaded revision on the node", async () => {
    const res = await ts.admin.checkDeploymentHealth({ deployment: "chat", wait: { seconds: 20n, nanos: 0 } });
    expect(res.revisions).toEqual([
      expect.objectContaining({ revision: 2n, nodeId: node.nodeId, answered: true, healthy: true, detail: "rt-2 answers" }),
    ]);
    const none = await ts.admin.checkDeploymentHealth({ deployment: "drainme" });
    expect(none.revisions).toEqual([]);
    await expect(ts.admin.checkDeploymentHealth({ deployment: "chat", wait: { seconds: 61n, nanos: 0 } })).rejects.toMatchObject({
      code: Code.InvalidArgument,
    });
  });

  it("forge deployments lists, shows history, and refuses a usage error with exit 2", async () => {
    const caFile = join(root, "ca.crt");
    writeFileSync(caFile, ts.caPem);
    const forge = async (...args: string[]) => {
      let out = "";
      let err = "";
      const sink = (add: (t: string) => void) =>
        new Writable({
          write(chunk: Buffer, _enc, cb) {
            add(chunk.toString());
            cb();
          },
        });
      const stdin = new PassThrough();
      stdin.end();
      const env = { MODELFORGE_SERVER: ts.url, MODELFORGE_CA_FILE: caFile, MODELFORGE_OPERATOR_API_KEY: testAdminKey };
      const code = await runCli(args, {
        stdout: sink((t) => (out += t)),
        stderr: sink((t) => (err += t)),
        stdin,
        env,
        signal: new AbortController().signal,
      });
      return { code, out, err };
    };
    const list = await forge("deployments", "list");
    expect(list.code, list.err).toBe(0);
    expect(list.out).toMatch(/chat\s+ready\s+1\/1\s+serving\s+3\s/);
    const got = await forge("deployments", "get", "chat");
    expect(got.code).toBe(0);
    expect(got.out).toMatch(/State:\s+ready/);
    expect(got.out).toContain("History");
    expect(got.out).toMatch(/\s3\s+0\s+loading\s+failed\s+load failed: MODEL_LOAD_FAILED: not a GGUF file/);
    expect(got.out).toMatch(/Replicas:\s+1\/1 ready/);
    const health = await forge("deployments", "health", "chat");
    expect(health.code, health.err).toBe(0);
    expect(health.out).toMatch(/\s3?2\s+\S+\s+healthy\s+rt-2 answers/);
    expect((await forge("deployments", "create", "x", "--profile", "tiny-cpu")).code).toBe(2);
    expect((await forge("deployments", "revision", "chat")).code).toBe(2);
    const missing = await forge("deployments", "drain", "no-such");
    expect(missing.code).toBe(1);
    expect(missing.err).toMatch(/^error: not_found: deployment no-such not found/);
    const created = await forge(
      "deployments",
      "create",
      "via-cli",
      "--node",
      node.nodeId,
      "--profile",
      "tiny-cpu",
      "--repository",
      repository,
      "--commit",
      commitA,
    );
    expect(created.code, created.err).toBe(0);
    expect(created.out).toContain("Deployment created.");
    await until("via-cli", DeploymentState.READY);
    const drained = await forge("deployments", "drain", "via-cli");
    expect(drained.code).toBe(0);
    expect(drained.out).toContain("Deployment via-cli is draining, wanted drained.");
  });
});
