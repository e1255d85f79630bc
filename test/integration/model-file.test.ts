// Which file of a commit a runtime loads, end to end: a real control plane, a real agent process
// running llama.cpp, and commits shaped like a Hugging Face repository (README.md, config.json and
// two quantisations, here two different tiny GGUF models). The deployment loads the file it names
// (the agent's runtime record and the runtime process's own command line say so, and the two
// models answer the same greedy prompt differently), a commit it cannot decide is refused listing
// its GGUFs, a commit with one GGUF needs no name, and a probe loads the file it names.
import { createHash } from "node:crypto";
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { PassThrough } from "node:stream";
import { Code, createClient, type Interceptor } from "@connectrpc/connect";
import { grpcTransport } from "../../common/http2-sessions.js";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { runCli } from "../../cli/cli.js";
import { JobState } from "../../gen/proto/modelforge/admin/v1/admin_pb.js";
import { DeploymentService, DeploymentState } from "../../gen/proto/modelforge/deployment/v1/deployment_pb.js";
import { EngineKind, JobFailureCode, ProbeInput } from "../../gen/proto/modelforge/jobs/v1/jobs_pb.js";
import { writeTinyLlamaGguf } from "../../scripts/gguf.js";
import { jobToEnd } from "../support/jobs.js";
import { enrollTestNode, eventually, type TestNode } from "../support/node.js";
import type { AgentProcess } from "../support/process.js";
import { startTestServer, testAdminKey, type TestServer } from "../support/server.js";
import { spawnServingAgent, storeArtifact } from "../support/serving.js";

const repository = "acme/tiny";
const multi = "1".repeat(40); // README.md, config.json, tiny.Q4_K_M.gguf, tiny.Q8_0.gguf
const single = "2".repeat(40); // README.md, config.json, tiny.gguf
const q4 = "tiny.Q4_K_M.gguf";
const q8 = "tiny.Q8_0.gguf";

let ts: TestServer;
let root: string;
let node: TestNode;
let agent: AgentProcess;
let secret: string;
/** The files of each commit as written locally: path in the commit -> local file and digest. */
const files: { [commit: string]: { [path: string]: { file: string; sha256: string } } } = { [multi]: {}, [single]: {} };

const onNode = (commit: string, path: string) => join(root, repository, commit, path);
const record = async (name: string) => (await ts.admin.getDeployment({ deployment: name })).deployment!;

/** The agent's record of the runtime serving `runtimeId` (its registry beside the state). */
function runtimeRecord(runtimeId: string): { pid: number; modelPath: string } {
  const registry = JSON.parse(readFileSync(join(dirname(node.statePath), "runtimes.json"), "utf8")) as {
    runtimes: { id: string; pid: number; modelPath: string }[];
  };
  const found = registry.runtimes.find((r) => r.id === runtimeId);
  if (found === undefined) throw new Error(`no runtime ${runtimeId} in the agent's registry`);
  return found;
}

/** The file the runtime process was started on, from its own command line: `--model PATH`. */
function modelArgOf(pid: number): string {
  const argv = readFileSync(`/proc/${pid}/cmdline`, "utf8").split("\0");
  return argv[argv.indexOf("--model") + 1]!;
}

/** Waits until revision `revision` of `name` is READY and every older revision UNLOADED; its runtime id. */
async function servingRevision(name: string, revision: bigint): Promise<string> {
  return eventually(
    async () => {
      const r = await record(name);
      const now = r.instances.find((i) => i.revision === revision);
      const older = r.instances.filter((i) => i.revision < revision);
      if (now?.state !== DeploymentState.READY || older.some((i) => i.state !== DeploymentState.UNLOADED)) return undefined;
      return now.runtimeId;
    },
    120_000,
    `${name} revision ${revision} READY, older ones unloaded`,
  );
}

/** A greedy completion from the deployment, through DeploymentService with a service key. */
async function answer(name: string): Promise<{ text: string; revision: bigint }> {
  const bearer: Interceptor = (next) => (req) => {
    req.header.set("authorization", `Bearer ${secret}`);
    return next(req);
  };
  const client = createClient(DeploymentService, grpcTransport({ baseUrl: ts.url, nodeOptions: { ca: ts.caPem }, interceptors: [bearer] }));
  const prompt = { prompt: "The quick brown fox", max_tokens: 12, temperature: 0 };
  const res = await client.invoke({ deploymentId: name, contentType: "application/json", payload: Buffer.from(JSON.stringify(prompt)) });
  const body = JSON.parse(Buffer.from(res.payload).toString("utf8")) as { choices: { text: string }[] };
  return { text: body.choices[0]!.text, revision: res.revision };
}

/** Runs `forge args...` in this process against the test server. */
async function forge(args: string[]): Promise<{ code: number; stdout: string; stderr: string }> {
  const caFile = join(root, "ca.crt");
  writeFileSync(caFile, ts.caPem);
  const [stdout, stderr] = [new PassThrough(), new PassThrough()];
  const text = (s: PassThrough) => {
    let t = "";
    s.on("data", (c: Buffer) => (t += c.toString()));
    return () => t;
  };
  const [out, err] = [text(stdout), text(stderr)];
  const stdin = new PassThrough();
  stdin.end();
  const env = { MODELFORGE_SERVER: ts.url, MODELFORGE_CA_FILE: caFile, MODELFORGE_OPERATOR_API_KEY: testAdminKey };
  const code = await runCli(args, { stdout, stderr, stdin, env, signal: new AbortController().signal });
  return { code, stdout: out(), stderr: err() };
}

/** Writes a small text file into `dir`; its path and digest. */
function textFile(dir: string, name: string, content: string) {
  const file = join(dir, name);
  writeFileSync(file, content);
  return { file, sha256: createHash("sha256").update(content).digest("hex") };
}

beforeAll(async () => {
  root = mkdtempSync(join(tmpdir(), "mf-modelfile-root-"));
  const src = join(root, "src");
  mkdirSync(src);
  const model = async (name: string, seed: number) => {
    const file = join(src, name);
    return { file, sha256: (await writeTinyLlamaGguf(file, { seed, contextLength: 1024 })).sha256 };
  };
  const readme = textFile(src, "README.md", "# tiny\nTwo quantisations of a tiny model.\n");
  const config = textFile(src, "config.json", '{"architectures":["LlamaForCausalLM"]}\n');
  files[multi] = { "README.md": readme, "config.json": config, [q4]: await model(q4, 1), [q8]: await model(q8, 2) };
  files[single] = { "README.md": readme, "config.json": config, "tiny.gguf": files[multi][q4]! };

  ts = await startTestServer({ MODELFORGE_HEARTBEAT_INTERVAL: "200ms", MODELFORGE_LEASE_DURATION: "20s", MODELFORGE_APPROVED_ROOTS: root });
  node = await enrollTestNode(ts, "modelfile");
  await ts.admin.createRuntimeProfile({ name: "tiny-cpu", engine: EngineKind.LLAMA_CPP, contextSize: 1024, threads: 1 });
  agent = await spawnServingAgent(ts.admin, node, root);
  await eventually(
    async () => (await ts.admin.getNode({ nodeId: node.nodeId })).node!.capabilities.includes("runtime.probe.v1"),
    30_000,
    "the agent advertising runtime.probe.v1",
  );
  for (const commit of [multi, single]) {
    for (const [path, f] of Object.entries(files[commit]!)) await storeArtifact(ts.admin, { repository, commit, path }, f.file, f.sha256);
  }
  secret = (await ts.admin.createServiceKey({ name: "svc", deployments: ["pick", "single"] })).secret;
}, 120_000);

afterAll(async () => {
  await agent?.stop();
  await ts?.stop();
  if (root) rmSync(root, { recursive: true, force: true });
});

describe("the model file a deployment loads", () => {
  it("refuses a commit with two GGUFs and none named, listing both, and a name the commit does not hold", async () => {
    const base = { name: "pick", nodeId: node.nodeId, runtimeProfile: "tiny-cpu", repository, commit: multi, targetRoot: root };
    await expect(ts.admin.createDeployment(base)).rejects.toMatchObject({
      code: Code.InvalidArgument,
      rawMessage: `model_file: the commit holds 2 .gguf files ("${q4}", "${q8}"); name the one to load (${repository}@${multi})`,
    });
    await expect(ts.admin.createDeployment({ ...base, modelFile: "tiny.Q2_K.gguf" })).rejects.toMatchObject({
      code: Code.InvalidArgument,
      rawMessage: expect.stringMatching(/^model_file: "tiny\.Q2_K\.gguf" is not a file of the commit, which holds "README\.md", /),
    });
    const create = `deployments create pick --node ${node.nodeId} --profile tiny-cpu --repository ${repository} --commit ${multi}`;
    const cli = await forge(create.split(" "));
    expect(cli.code).not.toBe(0);
    expect(cli.stderr).toContain(`"${q4}", "${q8}"`);
    expect((await ts.admin.listDeploymentRecords({})).deployments).toHaveLength(0);
  });

  it("loads the file named with forge --model-file, with the commit's other files beside it", async () => {
    const create = `deployments create pick --node ${node.nodeId} --profile tiny-cpu --repository ${repository} --commit ${multi}`;
    const created = await forge([...create.split(" "), "--target-root", root, "--model-file", q8]);
    expect(created.code, created.stderr).toBe(0);
    const runtimeId = await servingRevision("pick", 1n);
    const r = await record("pick");
    expect(r.modelFile).toBe(q8);
    expect(r.instances[0]!.modelFile).toBe(q8);
    const runtime = runtimeRecord(runtimeId);
    expect(runtime.modelPath).toBe(onNode(multi, q8));
    expect(modelArgOf(runtime.pid)).toBe(onNode(multi, q8));
    for (const path of Object.keys(files[multi]!)) expect(existsSync(onNode(multi, path)), path).toBe(true);
    const shown = await forge(["deployments", "get", "pick"]);
    expect(shown.stdout).toMatch(new RegExp(`Model file:\\s+${q8.replace(/\./g, "\\.")}`));
  }, 180_000);

  it("moves to the other GGUF with forge deployments revision --model-file; that model answers differently", async () => {
    const before = await answer("pick");
    expect(before.revision).toBe(1n);
    const moved = await forge(["deployments", "revision", "pick", "--model-file", q4]);
    expect(moved.code, moved.stderr).toBe(0);
    const runtimeId = await servingRevision("pick", 2n);
    const r = await record("pick");
    expect(r.modelFile).toBe(q4);
    expect(r.instances.map((i) => [i.revision, i.modelFile])).toEqual([
      [2n, q4],
      [1n, q8],
    ]);
    expect(modelArgOf(runtimeRecord(runtimeId).pid)).toBe(onNode(multi, q4));
    const after = await answer("pick");
    expect(after.revision).toBe(2n);
    // Two models of different weights: the same greedy prompt continues differently.
    expect(after.text).not.toBe(before.text);
    // Nothing changes when the file named is the one loaded.
    await expect(ts.admin.updateDeploymentRevision({ deployment: "pick", modelFile: q4 })).rejects.toMatchObject({
      code: Code.InvalidArgument,
    });
  }, 240_000);

  it("deploys a commit with one GGUF among other files without naming it", async () => {
    await ts.admin.createDeployment({
      name: "single",
      nodeId: node.nodeId,
      runtimeProfile: "tiny-cpu",
      repository,
      commit: single,
      targetRoot: root,
    });
    const runtimeId = await servingRevision("single", 1n);
    expect((await record("single")).modelFile).toBe("tiny.gguf");
    expect(modelArgOf(runtimeRecord(runtimeId).pid)).toBe(onNode(single, "tiny.gguf"));
    expect((await answer("single")).text.length).toBeGreaterThan(0);
  }, 180_000);

  it("probes the file a probe names among the acquired artifacts, and refuses to guess between two", async () => {
    const artifacts = Object.entries(files[multi]!).map(([path, f]) => ({ path: onNode(multi, path), sha256: f.sha256 }));
    const probe = (modelFile: string) => ({
      kind: {
        case: "runtimeProbe" as const,
        value: {
          runtimeProfile: "tiny-cpu",
          runtimeEnvironment: "cpu",
          artifacts,
          modelFile,
          probeInputId: "completion-v1",
          probeInput: ProbeInput.COMPLETION_V1,
          keepLoaded: true,
        },
      },
    });
    const unnamed = await jobToEnd(ts.admin, node.nodeId, probe(""), 60_000);
    expect(unnamed.state).toBe(JobState.FAILED);
    expect(unnamed.failure).toMatchObject({
      code: JobFailureCode.INVALID_SPEC,
      message: expect.stringContaining(`"${onNode(multi, q4)}"`),
    });
    const named = await jobToEnd(ts.admin, node.nodeId, probe(onNode(multi, q8)), 120_000);
    expect(named.state, JSON.stringify(named.failure)).toBe(JobState.SUCCEEDED);
    if (named.result!.result.case !== "runtimeProbe") throw new Error("not a probe result");
    const runtimeId = named.result!.result.value.runtimeId;
    expect(runtimeRecord(runtimeId).modelPath).toBe(onNode(multi, q8));
    const unloaded = await jobToEnd(ts.admin, node.nodeId, { kind: { case: "runtimeUnload", value: { runtimeId } } }, 60_000);
    expect(unloaded.state).toBe(JobState.SUCCEEDED);
  }, 240_000);
});
