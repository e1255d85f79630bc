// Serving deployments end to end: a real control plane, a real agent process holding the tiny GGUF
// in llama.cpp, a service key, and a plain gRPC client (generated at run time from proto/). Unary
// and streamed invokes with real generated tokens; bad input refused as the caller's (invalid_argument);
// the credentials DeploymentService refuses and
// the services that refuse a service key; drain with a request in flight; unload frees the
// process; logs followed live; an agent restarted reports nothing held.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import * as grpc from "@grpc/grpc-js";
import { Code, ConnectError, createClient, type Interceptor } from "@connectrpc/connect";
import { grpcTransport } from "../../common/http2-sessions.js";
import type { MessageInitShape } from "@bufbuild/protobuf";
import { DeploymentService, DeploymentState } from "../../gen/proto/modelforge/deployment/v1/deployment_pb.js";
import { EngineKind, type JobSpecSchema } from "../../gen/proto/modelforge/jobs/v1/jobs_pb.js";
import { readStat } from "../../agent/engines/proc.js";
import { readFileSync } from "node:fs";
import { forgeAt, type ForgeRun } from "../support/forge.js";
import { writeTinyLlamaGguf } from "../../scripts/gguf.js";
import { plainDeploymentService } from "../support/plain-grpc.js";
import { startTestServer, testAdminKey, type TestServer } from "../support/server.js";
import { enrollTestNode, eventually, type TestNode } from "../support/node.js";
import { spawnAgent, type AgentProcess } from "../support/process.js";
import { jobToEnd } from "../support/jobs.js";
import { errorLines, storeArtifact, telemetryArrived } from "../support/serving.js";

let ts: TestServer;
let root: string;
let node: TestNode;
let agent: AgentProcess;
let model: { path: string; sha256: string };
let secret: string;
let plain: any;
let deploymentId: string;
const repository = "acme/tiny";
const commitA = "a".repeat(40);
const commitB = "b".repeat(40);
const agentEnv = () => ({
  MODELFORGE_AGENT_RUNTIMES: "on",
  MODELFORGE_AGENT_ARTIFACT_SOURCES: "control-plane",
  MODELFORGE_AGENT_ARTIFACT_ROOTS: root,
});
const stateOfTiny = async () => (await ts.admin.getDeployment({ deployment: "tiny" })).deployment!.deployment!;
const untilState = (state: DeploymentState, what = `tiny ${DeploymentState[state]}`) =>
  eventually(async () => ((await stateOfTiny()).state === state ? true : undefined), 90_000, what);

// Not on the deployment's ordering key: it must not wait behind the controller's jobs.
const finished = (spec: MessageInitShape<typeof JobSpecSchema>) => jobToEnd(ts.admin, node.nodeId, spec, 60_000);

/** A unary call on the plain gRPC client; resolves with the response or the grpc error. */
function unary(method: string, req: object, metadata: grpc.Metadata): Promise<any> {
  return new Promise((resolve, reject) => plain[method](req, metadata, (e: unknown, r: unknown) => (e ? reject(e) : resolve(r))));
}

/** An Invoke expected to fail: its status and message (grpc-js leaves the message percent-encoded). */
async function refusal(req: object): Promise<[number, string]> {
  const err = (await unary("Invoke", req, keyMetadata()).then(
    () => ({ code: grpc.status.OK, details: "answered" }),
    (e: unknown) => e,
  )) as grpc.ServiceError;
  return [err.code, decodeURIComponent(err.details)];
}

function keyMetadata(key = secret): grpc.Metadata {
  const md = new grpc.Metadata();
  md.set("authorization", `Bearer ${key}`);
  return md;
}

const completion = (max = 8, extra: object = {}) =>
  Buffer.from(JSON.stringify({ prompt: "The quick brown fox", max_tokens: max, temperature: 0, ...extra }));

beforeAll(async () => {
  root = mkdtempSync(join(tmpdir(), "mf-invoke-root-"));
  const path = join(root, "tiny.gguf");
  model = { path, ...(await writeTinyLlamaGguf(path, { contextLength: 8192 })) };
  ts = await startTestServer({ MODELFORGE_HEARTBEAT_INTERVAL: "200ms", MODELFORGE_LEASE_DURATION: "20s", MODELFORGE_APPROVED_ROOTS: root });
  node = await enrollTestNode(ts, "serving");
  await ts.admin.createRuntimeProfile({ name: "tiny-cpu", engine: EngineKind.LLAMA_CPP, contextSize: 8192, threads: 1 });
  agent = spawnAgent(node.statePath, agentEnv());
  await eventually(
    async () => {
      const n = (await ts.admin.getNode({ nodeId: node.nodeId })).node!;
      return n.connected && n.capabilities.includes("deployment.load.v1");
    },
    30_000,
    "the agent online, advertising deployment.load.v1",
  );
  // The model in the artifact store under two commits (a revision change needs another commit).
  for (const commit of [commitA, commitB]) {
    await storeArtifact(ts.admin, { repository, commit, path: "tiny.gguf" }, model.path, model.sha256);
  }
  await telemetryArrived(ts.admin, node.nodeId);
  const created = await ts.admin.createDeployment({
    name: "tiny",
    nodeId: node.nodeId,
    runtimeProfile: "tiny-cpu",
    repository,
    commit: commitA,
    targetRoot: root,
    maxInFlight: 16,
  });
  deploymentId = created.deployment!.deployment!.id;
  await untilState(DeploymentState.READY);
  secret = (await ts.admin.createServiceKey({ name: "svc", deployments: ["tiny"] })).secret;
  plain = plainDeploymentService(ts.url, ts.caPem);
}, 120_000);

afterAll(async () => {
  plain?.close();
  await agent?.stop();
  await ts?.stop();
  if (root) rmSync(root, { recursive: true, force: true });
});

// In order: the deployment "tiny" and its agent go through revisions, a drain, an unload and a restart.
describe.sequential("DeploymentService through a real agent", () => {
  it("answers a unary completion with real generated tokens, by name or id", async () => {
    for (const target of ["tiny", deploymentId]) {
      const res = await unary("Invoke", { deploymentId: target, contentType: "application/json", payload: completion() }, keyMetadata());
      const body = JSON.parse(Buffer.from(res.payload).toString("utf8"));
      expect(body.object).toBe("text_completion");
      expect(body.usage.completion_tokens).toBeGreaterThan(0);
      expect(body.choices[0].text.length).toBeGreaterThan(0);
      expect(res.revision).toBe("1");
    }
    const chat = await unary(
      "Invoke",
      { deploymentId: "tiny", payload: Buffer.from(JSON.stringify({ messages: [{ role: "user", content: "hi" }], max_tokens: 4 })) },
      keyMetadata(),
    );
    expect(JSON.parse(Buffer.from(chat.payload).toString("utf8")).object).toBe("chat.completion");
  }, 60_000);

  it("answers bad input as the caller's mistake: model overwritten, deep nesting, a runtime's 4xx, a tiny timeout", async () => {
    const errorsBefore = errorLines(ts.logs()).length;
    // The deployment decides the model: a payload naming another is served by the runtime's own.
    const served = await unary("Invoke", { deploymentId: "tiny", payload: completion(2, { model: "other" }) }, keyMetadata());
    const body = JSON.parse(Buffer.from(served.payload).toString("utf8"));
    expect(body.usage.completion_tokens).toBeGreaterThan(0);
    expect(body.model).not.toBe("other");
    // 50,000 levels deep: refused at the edge, before the node (whose JSON.stringify would overflow).
    const deep = `{"prompt":"x","extra":${"[".repeat(50_000)}${"]".repeat(50_000)}}`;
    expect(await refusal({ deploymentId: "tiny", payload: Buffer.from(deep) })).toEqual([
      grpc.status.INVALID_ARGUMENT,
      "payload: the body nests deeper than 64 levels",
    ]);
    // A value the edge lets through but the engine refuses (more tokens than a sequence holds):
    // invalid_argument, naming the field and its bound.
    const [code, message] = await refusal({ deploymentId: "tiny", payload: completion(10_000) });
    expect(code).toBe(grpc.status.INVALID_ARGUMENT);
    expect(message).toMatch(/^max_tokens: must be an integer from 1 to 8192 \(the tokens a sequence holds/);
    expect(Buffer.byteLength(message)).toBeLessThanOrEqual(256);
    // A nanosecond is no timeout: refused, not taken as the 30 s default.
    expect(await refusal({ deploymentId: "tiny", payload: completion(), timeout: { seconds: "0", nanos: 1 } })).toEqual([
      grpc.status.INVALID_ARGUMENT,
      "timeout: must be at least 1 ms (leave it unset for the default)",
    ]);
    expect(errorLines(ts.logs()).slice(errorsBefore)).toEqual([]);
  }, 60_000);

  it("streams the runtime's chunks as they are produced", async () => {
    const call = plain.InvokeStream(
      { deploymentId: "tiny", payload: completion(12, { stream_options: { include_usage: true } }) },
      keyMetadata(),
    );
    const chunks: any[] = [];
    for await (const m of call) chunks.push(JSON.parse(Buffer.from(m.payload).toString("utf8")));
    const text = chunks.map((c) => c.choices?.[0]?.text ?? "").join("");
    expect(chunks.length).toBeGreaterThan(2);
    expect(text.length).toBeGreaterThan(0);
    expect(chunks.at(-1).usage.completion_tokens).toBeGreaterThan(0);
  }, 60_000);

  it("refuses a node certificate, the operator key, no key and a foreign key; scopes the list", async () => {
    const state = await node.state();
    const withCert = createClient(
      DeploymentService,
      grpcTransport({ baseUrl: ts.url, nodeOptions: { ca: ts.caPem, cert: state.certPem, key: state.keyPem } }),
    );
    await expect(withCert.listDeployments({})).rejects.toMatchObject({ code: Code.PermissionDenied });
    const adminHeader = new grpc.Metadata();
    adminHeader.set("x-modelforge-admin-token", testAdminKey);
    await expect(unary("ListDeployments", {}, adminHeader)).rejects.toMatchObject({ code: grpc.status.PERMISSION_DENIED });
    await expect(unary("ListDeployments", {}, new grpc.Metadata())).rejects.toMatchObject({ code: grpc.status.UNAUTHENTICATED });
    await expect(unary("ListDeployments", {}, keyMetadata(`mfsk_${"A".repeat(43)}`))).rejects.toMatchObject({
      code: grpc.status.UNAUTHENTICATED,
    });
    const listed = await unary("ListDeployments", {}, keyMetadata());
    expect(listed.deployments.map((d: any) => d.name)).toEqual(["tiny"]);
    const other = (await ts.admin.createServiceKey({ name: "other", deployments: ["something-else"] })).secret;
    expect((await unary("ListDeployments", {}, keyMetadata(other))).deployments).toEqual([]);
    await expect(unary("Invoke", { deploymentId: "tiny", payload: completion() }, keyMetadata(other))).rejects.toMatchObject({
      code: grpc.status.NOT_FOUND,
    });
  });

  it("refuses a service key on admin and node RPCs", async () => {
    const bearer: Interceptor = (next) => (req) => {
      req.header.set("authorization", `Bearer ${secret}`);
      return next(req);
    };
    const admin = createClient(
      (await import("../../gen/proto/modelforge/admin/v1/admin_pb.js")).AdminService,
      grpcTransport({ baseUrl: ts.url, nodeOptions: { ca: ts.caPem }, interceptors: [bearer] }),
    );
    await expect(admin.listNodes({})).rejects.toMatchObject({ code: Code.PermissionDenied });
    const state = await node.state();
    const agentSvc = createClient(
      (await import("../../gen/proto/modelforge/agent/v1/agent_pb.js")).AgentService,
      grpcTransport({
        baseUrl: ts.url,
        nodeOptions: { ca: ts.caPem, cert: state.certPem, key: state.keyPem },
        interceptors: [bearer],
      }),
    );
    await expect(agentSvc.claimJob({})).rejects.toMatchObject({ code: Code.PermissionDenied });
  });

  it("revokes a key at once, audited", async () => {
    const { key, secret: s } = await ts.admin.createServiceKey({ name: "short", deployments: ["tiny"] });
    await unary("ListDeployments", {}, keyMetadata(s));
    await ts.admin.revokeServiceKey({ id: key!.id, reason: "test" });
    await expect(unary("ListDeployments", {}, keyMetadata(s))).rejects.toMatchObject({ code: grpc.status.UNAUTHENTICATED });
    // The refusal's audit row is written beside the answer, not before it.
    await eventually(
      async () => {
        const actions = (await ts.admin.listAuditEvents({ targetId: key!.id })).events.map((e) => e.action);
        return ["service_key.created", "service_key.revoked", "service_key.refused"].every((a) => actions.includes(a));
      },
      20_000,
      "created, revoked and refused in the audit log",
    );
    expect(ts.logs()).not.toContain(s);
  });

  it("follows the runtime's logs live", async () => {
    const abort = new AbortController();
    const seen: string[] = [];
    const watching = (async () => {
      try {
        for await (const batch of ts.admin.watchDeploymentLogs({ deploymentId: "tiny", tailLines: 5 }, { signal: abort.signal })) {
          for (const l of batch.lines) seen.push(l.text);
        }
      } catch (err) {
        if (ConnectError.from(err).code !== Code.Canceled) throw err;
      }
    })();
    const before = seen.length;
    await unary("Invoke", { deploymentId: "tiny", payload: completion(2) }, keyMetadata());
    await eventually(
      () => seen.slice(before).some((l) => l.includes("prompt eval time")),
      20_000,
      "llama-server's timing line of the new request",
    );
    abort.abort();
    await watching;
  }, 60_000);

  it("forge service-keys create|list|revoke and forge deployments logs", async () => {
    const created = await forge(["service-keys", "create", "--name", "cli", "--deployment", "tiny", "--ttl", "1h"]);
    expect(created.code, created.stderr).toBe(0);
    const key = /mfsk_[A-Za-z0-9_-]{43}/.exec(created.stdout)![0];
    expect((await unary("ListDeployments", {}, keyMetadata(key))).deployments).toHaveLength(1);
    const listed = await forge(["service-keys", "list"]);
    expect(listed.stdout).toContain("cli");
    expect(listed.stdout).not.toContain(key);
    const id = /^([0-9a-f-]{36})\s+active\s+cli\b/m.exec(listed.stdout)![1]!;
    expect((await forge(["service-keys", "revoke", id, "--reason", "done"])).code).toBe(0);
    await expect(unary("ListDeployments", {}, keyMetadata(key))).rejects.toMatchObject({ code: grpc.status.UNAUTHENTICATED });
    const logs = await forge(["deployments", "logs", "tiny", "--tail", "20"]);
    expect(logs.code, logs.stderr).toBe(0);
    // llama-server writes its log to standard error: its lines are labelled so.
    expect(logs.stdout).toMatch(/ err r1 .*prompt eval time/);
  }, 60_000);

  it("changes the revision under continuous invokes with zero failed requests", async () => {
    let stop = false;
    let ok = 0;
    const failures: string[] = [];
    const revisions = new Set<string>();
    const loop = (async () => {
      while (!stop) {
        try {
          const res = await unary("Invoke", { deploymentId: "tiny", payload: completion(2) }, keyMetadata());
          revisions.add(res.revision);
          ok++;
        } catch (err) {
          failures.push((err as Error).message);
        }
      }
    })();
    try {
      await ts.admin.updateDeploymentRevision({ deployment: "tiny", commit: commitB });
      await eventually(
        async () => {
          const d = (await ts.admin.getDeployment({ deployment: "tiny" })).deployment!;
          return (
            d.instances.find((i) => i.revision === 1n)?.state === DeploymentState.UNLOADED && d.deployment!.state === DeploymentState.READY
          );
        },
        90_000,
        "revision 2 serving and revision 1 unloaded",
      );
      // A few more on the new revision alone.
      const after = ok;
      await eventually(() => ok >= after + 3, 30_000, "invokes on revision 2");
    } finally {
      stop = true;
      await loop;
    }
    expect(failures).toEqual([]);
    expect([...revisions].sort()).toEqual(["1", "2"]);
  }, 180_000);

  it("an agent killed mid-way is reconciled: its runtime reaped, the deployment loaded again", async () => {
    await agent.kill();
    agent = spawnAgent(node.statePath, agentEnv());
    // The new agent holds nothing (the old runtime is an orphan it stops), so the control plane reloads.
    await eventually(
      async () => {
        try {
          const res = await unary("Invoke", { deploymentId: "tiny", payload: completion(2) }, keyMetadata());
          return res.revision === "2";
        } catch {
          return undefined;
        }
      },
      120_000,
      "invokes answered again after the restart",
    );
    expect(agent.output()).toContain("orphaned runtime from an earlier agent");
    const registry = JSON.parse(readFileSync(join(dirname(node.statePath), "runtimes.json"), "utf8")) as { runtimes: unknown[] };
    expect(registry.runtimes).toHaveLength(1);
  }, 180_000);

  it("drains with a request in flight: it completes, new ones are refused at once; then unloads, freeing the process", async () => {
    const revision = BigInt((await stateOfTiny()).revision);
    // The runtime is paused (SIGSTOP), so the request is certainly in flight when the drain begins.
    const pid = await runtimePid();
    process.kill(pid, "SIGSTOP");
    let resumed = false;
    try {
      const call = plain.InvokeStream(
        { deploymentId: "tiny", payload: completion(16, { stream_options: { include_usage: true } }) },
        keyMetadata(),
      );
      const chunks = (async () => {
        const all: any[] = [];
        for await (const m of call) all.push(JSON.parse(Buffer.from(m.payload).toString("utf8")));
        return all;
      })();
      // Wait until the node has it: its layered health counts it in flight.
      await eventually(
        async () => {
          const h = await finished({ kind: { case: "deploymentHealth", value: { deploymentId, revision } } });
          const r = h.result?.result;
          return r?.case === "deploymentHealth" && r.value.detail.includes("1 in flight");
        },
        30_000,
        "the request in flight on the node",
      );
      const drainsStarted = () =>
        agent
          .output()
          .split("\n")
          .filter((l) => l.includes('"deployment.drain.v1"') && l.includes("job started")).length;
      const drainsBefore = drainsStarted();
      await ts.admin.drainDeployment({ deployment: "tiny" });
      // Refused at the control plane at once, before the node has even heard of the drain.
      await expect(unary("Invoke", { deploymentId: "tiny", payload: completion() }, keyMetadata())).rejects.toMatchObject({
        code: grpc.status.UNAVAILABLE,
        details: expect.stringContaining("draining"),
      });
      // The node has started the drain (the agent logs each job it starts) while the request is
      // still held in flight; only then may the runtime go on.
      await eventually(() => drainsStarted() > drainsBefore, 30_000, "the drain started on the node");
      process.kill(pid, "SIGCONT");
      resumed = true;
      // The request in flight completed, not cut.
      expect((await chunks).at(-1).usage.completion_tokens).toBeGreaterThan(0);
      await untilState(DeploymentState.UNLOADED);
      const drains = (await ts.admin.listJobs({ orderingKey: deploymentId })).jobs.filter((j) => j.spec?.kind.case === "deploymentDrain");
      const last = drains.find((j) => j.spec?.kind.case === "deploymentDrain" && j.spec.kind.value.revision === revision);
      expect(last?.result?.result).toMatchObject({ case: "deploymentDrain", value: { completedInFlight: 1 } });
      await eventually(async () => (await readStat(pid)) === undefined, 30_000, "the runtime process gone");
    } finally {
      if (!resumed) process.kill(pid, "SIGCONT");
    }
  }, 120_000);
});

/** The pid of the llama.cpp worker the agent started (its runtime registry beside the state). */
async function runtimePid(): Promise<number> {
  const { readFileSync } = await import("node:fs");
  const registry = JSON.parse(readFileSync(join(dirname(node.statePath), "runtimes.json"), "utf8")) as { runtimes: { pid: number }[] };
  expect(registry.runtimes).toHaveLength(1);
  return registry.runtimes[0]!.pid;
}

/** Runs `forge args...` in this process against the test server. */
function forge(args: string[]): Promise<ForgeRun> {
  return forgeAt(ts.url, ts.caPem, root, testAdminKey)(args);
}
