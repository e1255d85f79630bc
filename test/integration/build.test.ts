// The build's artefacts, run the way operators run them: the built control plane with plain node
// (a first start seeded from the build's database template), and the standalone agent (the bundle,
// and the single executable) copied alone into a directory with no node_modules, configured from an environment file, which
// enrolls and completes an artifact.acquire.v1 job from a loopback mirror. The bundle's
// llama-server/, copied alone, serves a completion with nothing of the checkout.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { execFile, spawn } from "node:child_process";
import { createHash, randomBytes } from "node:crypto";
import {
  chmodSync,
  copyFileSync,
  cpSync,
  existsSync,
  lstatSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  rmSync,
  statSync,
  writeFileSync,
} from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { promisify } from "node:util";
import { JobState } from "../../gen/proto/modelforge/admin/v1/admin_pb.js";
import { OpenAiClient } from "../../agent/engines/openai-client.js";
import { adminClientAt } from "../support/agent.js";
import { writeTinyLlamaGguf } from "../../scripts/gguf.js";
import { startMirror, type Mirror } from "../support/mirror.js";
import { eventually } from "../support/node.js";
import { waitFor } from "../support/wait.js";
import { freePort } from "../support/ports.js";
import { repoRoot, spawnServer, type ServerProcess } from "../support/process.js";

const run = promisify(execFile);
const key = "test-admin-key-0123456789abcdef";
const fakeNvidiaSmi = join(repoRoot, "test/fixtures/nvidia-smi");
const cleanups: (() => unknown)[] = [];
let server: ServerProcess;
let url: string;
let certs: string;
let artifactRoot: string;

beforeAll(async () => {
  // CI builds first (.ci/run), which makes this a no-op; on a developer's tree it builds what is stale.
  await run(process.execPath, ["scripts/build.mjs", "--if-stale", "--sea"], { cwd: repoRoot });
  const dir = mkdtempSync(join(tmpdir(), "mf-built-"));
  cleanups.push(() => rmSync(dir, { recursive: true, force: true }));
  certs = join(dir, "certs");
  artifactRoot = join(dir, "artifacts");
  mkdirSync(artifactRoot);
  server = spawnServer(
    {
      MODELFORGE_PORT: String(await freePort()),
      MODELFORGE_DATA_DIR: join(dir, "data"),
      MODELFORGE_CERTS_DIR: certs,
      MODELFORGE_OPERATOR_API_KEY: key,
      MODELFORGE_HEARTBEAT_INTERVAL: "200ms",
      MODELFORGE_SHUTDOWN_GRACE: "1s",
      MODELFORGE_APPROVED_ROOTS: artifactRoot,
    },
    [join(repoRoot, "dist/server/main.mjs")],
  );
  cleanups.push(async () => {
    server.child.kill("SIGTERM");
    await server.exited;
  });
  url = await server.ready;
}, 180_000);

afterAll(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

describe("the built control plane", () => {
  it("serves from dist/ and seeds a first start from the build's database template", () => {
    expect(server.stdout()).toContain('"msg":"embedded database created from the build\'s template"');
    // The template already holds every migration: nothing is applied on a first start.
    expect(server.stdout()).toMatch(/"migrationsApplied":\[\][^\n]*"msg":"database ready"/);
  });
});

describe("the standalone agent", () => {
  let mirror: Mirror;
  beforeAll(async () => {
    mirror = await startMirror();
    cleanups.push(() => mirror.close());
  });

  // The bundle runs with node; the single executable (Node's SEA) carries its own.
  it.each([
    { artefact: "modelforge-agent.mjs", command: (bin: string) => [process.execPath, bin] },
    { artefact: "modelforge-agent", command: (bin: string) => [bin] },
  ])(
    "$artefact runs from a directory without node_modules: enrolls, then completes an artifact job",
    async ({ artefact, command }) => {
      const home = mkdtempSync(join(tmpdir(), "mf-standalone-"));
      cleanups.push(() => rmSync(home, { recursive: true, force: true }));
      const bin = join(home, "bin", artefact);
      mkdirSync(dirname(bin));
      copyFileSync(join(repoRoot, "dist/agent", artefact), bin);
      chmodSync(bin, 0o755);
      for (let d = dirname(bin); d !== "/"; d = dirname(d)) expect(existsSync(join(d, "node_modules")), d).toBe(false);
      const [exe, ...pre] = command(bin) as [string, ...string[]];

      const root = artifactRoot;
      const statePath = join(home, "state", "agent", "state.json");
      const config = join(home, "agent.env");
      writeFileSync(
        config,
        [
          "# the installed agent's file, as deploy/agent.env lays it out",
          `MODELFORGE_AGENT_STATE=${statePath}`,
          `MODELFORGE_AGENT_ARTIFACT_SOURCES=${mirror.url}`,
          `MODELFORGE_AGENT_ARTIFACT_ROOTS=${root}`,
          "MODELFORGE_AGENT_BACKOFF_BASE=100ms",
          "",
        ].join("\n"),
      );
      const env = { PATH: `${fakeNvidiaSmi}:${process.env.PATH ?? ""}`, HOME: home };
      const admin = adminClientAt(url, join(certs, "ca.crt"), key);
      const token = await admin.createEnrollmentToken({ nodeName: `standalone-${artefact}` });
      const fingerprint = /--ca-fingerprint (\S+)/.exec(token.joinCommand)![1]!;
      const enrolled = await run(
        exe,
        [...pre, "enroll", "--config", config, "--server", url, "--token", token.token, "--ca-fingerprint", fingerprint],
        { cwd: home, env },
      );
      const nodeId = /enrolled as node (\S+);/.exec(enrolled.stdout)![1]!;
      expect(statSync(dirname(statePath)).mode & 0o777).toBe(0o700);
      expect(statSync(statePath).mode & 0o777).toBe(0o600);

      const agent = spawn(exe, [...pre, "run", "--config", config], { cwd: home, env, stdio: ["ignore", "pipe", "pipe"] });
      let output = "";
      agent.stdout.on("data", (c: Buffer) => (output += c.toString()));
      agent.stderr.on("data", (c: Buffer) => (output += c.toString()));
      const exited = new Promise<number | null>((resolve) => agent.on("exit", (code) => resolve(code)));
      cleanups.push(async () => {
        agent.kill("SIGKILL");
        await exited;
      });
      await eventually(
        async () => (await admin.getNode({ nodeId })).node!.capabilities.includes("artifact.acquire.v1"),
        30_000,
        "the standalone agent online, advertising artifact.acquire.v1",
      );

      const content = randomBytes(100_000);
      const commit = createHash("sha1").update(artefact).digest("hex");
      mirror.put("acme/tiny", commit, "model.gguf", { content });
      const sha256 = createHash("sha256").update(content).digest("hex");
      const { job } = await admin.createJob({
        nodeId,
        spec: {
          kind: {
            case: "artifactAcquire",
            value: {
              repository: "acme/tiny",
              commit,
              files: [{ path: "model.gguf", sizeBytes: BigInt(content.length), sha256 }],
              targetRoot: root,
            },
          },
        },
      });
      const done = await eventually(
        async () => {
          const j = (await admin.getJob({ jobId: job!.id })).job!;
          return [JobState.SUCCEEDED, JobState.FAILED].includes(j.state) ? j : undefined;
        },
        30_000,
        "the job to finish",
      );
      expect(done.state, JSON.stringify(done.failure)).toBe(JobState.SUCCEEDED);
      expect(readFileSync(join(root, "acme/tiny", commit, "model.gguf")).equals(content)).toBe(true);

      agent.kill("SIGTERM");
      expect(await exited).toBe(0);
      // Logs go to stdout as JSON lines (the journal keeps them under the service).
      expect(output).toMatch(/^\{"level":30,[^\n]*"service":"modelforge-agent"/m);
    },
    90_000,
  );

  it("runs llama.cpp from the bundle's llama-server/ copied anywhere: the binary and its libraries, nothing else", async () => {
    const home = mkdtempSync(join(tmpdir(), "mf-standalone-llama-"));
    cleanups.push(() => rmSync(home, { recursive: true, force: true }));
    cpSync(join(repoRoot, "dist/agent/llama-server"), join(home, "llama-server"), { recursive: true });
    // Real files, not links into this checkout.
    for (const name of readdirSync(join(home, "llama-server")))
      expect(lstatSync(join(home, "llama-server", name)).isSymbolicLink()).toBe(false);
    const modelPath = join(home, "tiny.gguf");
    await writeTinyLlamaGguf(modelPath);
    const server = spawn(
      join(home, "llama-server/llama-server"),
      ["--model", modelPath, "--host", "127.0.0.1", "--port", "0", "--ctx-size", "512", "--parallel", "1", "--no-webui"],
      { cwd: home, env: { PATH: "/usr/bin:/bin", HOME: home }, stdio: ["ignore", "ignore", "pipe"] },
    );
    let stderr = "";
    const exited = new Promise<void>((resolve) => server.on("exit", () => resolve()));
    cleanups.push(async () => {
      server.kill("SIGKILL");
      await exited;
    });
    const port = await new Promise<number>((resolve, reject) => {
      server.stderr.on("data", (c: Buffer) => {
        stderr += c.toString();
        const listening = /listening on http:\/\/127\.0\.0\.1:(\d+)/.exec(stderr);
        if (listening) resolve(Number(listening[1]));
      });
      void exited.then(() => reject(new Error(`llama-server exited: ${stderr.slice(-2000)}`)));
    });
    const client = new OpenAiClient(`http://127.0.0.1:${port}`);
    await waitFor(() => client.healthy(), { what: "llama-server healthy" });
    const completion = await client.completion("Hello", { max_tokens: 4, temperature: 0 });
    expect(completion.usage!.completion_tokens).toBeGreaterThan(0);
  }, 120_000);
});
