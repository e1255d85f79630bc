// Bench-only: a control plane (its own process), a real agent (its own process) holding a READY
// deployment "bench" whose runtime is the trivial stub OpenAI server (./stub-openai.ts), a service
// key for it, and the same stub started alone on loopback for direct calls: the setup shared by
// bench/invoke.ts and bench/openai.ts, so both measure a relay over the same floor.
import { spawn } from "node:child_process";
import { createHash } from "node:crypto";
import { mkdtempSync, rmSync } from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { Code, ConnectError, createClient, type Client, type Interceptor, type Transport } from "@connectrpc/connect";
import { grpcTransport } from "../../common/http2-sessions.js";
import { AdminService } from "../../gen/proto/modelforge/admin/v1/admin_pb.js";
import { DeploymentState } from "../../gen/proto/modelforge/deployment/v1/deployment_pb.js";
import { EngineKind } from "../../gen/proto/modelforge/jobs/v1/jobs_pb.js";
import { enrollNode } from "../../agent/enroll.js";
import { forkTs, Rpc } from "./ipc.js";
import { benchServerEnv } from "./server-env.js";
import { serverNodeFlags } from "../../server/tuning.js";

const adminKey = "bench-admin-key-0123456789abcdef";

export interface StubDeployment {
  /** The control plane's https URL and the CA its certificate chains to. */
  info: { url: string; caPem: string; fingerprint: string };
  /** The control plane's bench hooks (./invoke-server.ts). */
  server: Rpc;
  /** The service key's secret, scoped to deployment "bench". */
  secret: string;
  /** The control plane's, the agent's and the stub started alone's process ids, to read their CPU time. */
  pids: { server: number; agent: number; stub: number };
  /** The stub started alone: http://127.0.0.1:port. */
  stubOrigin: string;
  /** A gRPC transport to the control plane with these interceptors. */
  transport(interceptors?: Interceptor[]): Transport;
  close(): Promise<void>;
}

/** An interceptor that sets one header on every call. */
export const header =
  (name: string, value: string): Interceptor =>
  (next) =>
  (req) => {
    req.header.set(name, value);
    return next(req);
  };

/** Everything up; `stubArgs` go to both stubs (the agent's and the direct one), e.g. ["--pace-ms", "5"]. */
export async function startStubDeployment(step: (what: string) => void, stubArgs: string[] = []): Promise<StubDeployment> {
  const dir = mkdtempSync(join(tmpdir(), "mf-bench-stub-"));
  const serverChild = forkTs(new URL("./invoke-server.ts", import.meta.url), {
    // The control plane as `npm start` runs it: its young generation sized as in production.
    nodeFlags: [...serverNodeFlags, ...profileFlags],
    env: benchServerEnv(dir, adminKey, { MODELFORGE_LOG_LEVEL: "warn", MODELFORGE_APPROVED_ROOTS: dir }),
  });
  // Whatever happens, the children end with this process.
  const children: { kill(): unknown }[] = [serverChild];
  process.on("exit", () => {
    for (const c of children) c.kill();
  });
  const server = new Rpc(serverChild, "server");
  await server.waitFor("ready");
  const info = await server.call<{ url: string; caPem: string; fingerprint: string; pid: number }>("info");
  const transport = (interceptors: Interceptor[] = []) =>
    grpcTransport({ baseUrl: info.url, nodeOptions: { ca: info.caPem }, interceptors });
  const admin = createClient(AdminService, transport([header("x-modelforge-admin-token", adminKey)]));

  const token = await admin.createEnrollmentToken({ nodeName: "bench" });
  const statePath = join(dir, "agent", "state.json");
  const state = await enrollNode({ serverUrl: info.url, token: token.token, caFingerprint: info.fingerprint, statePath });
  const agentChild = forkTs(new URL("./invoke-agent.ts", import.meta.url), {
    nodeFlags: profileFlags,
    env: { ...process.env, BENCH_AGENT_STATE: statePath, BENCH_AGENT_ROOT: dir, BENCH_STUB_ARGS: JSON.stringify(stubArgs) },
  });
  children.push(agentChild);
  step("agent starting");
  await until(async () => {
    // Placement needs the node's telemetry (its disk) and a stored heartbeat as well as its capabilities.
    const got = await admin.getNode({ nodeId: state.nodeId });
    const node = got.node;
    const ready = node?.capabilities.includes("deployment.load.v1") && node.lastHeartbeatAt !== undefined && got.telemetry !== undefined;
    return ready ? true : undefined;
  }, "the agent");
  step("loading the stub deployment");
  await deployStub(admin, state.nodeId, dir);
  const { secret } = await admin.createServiceKey({ name: "bench", deployments: ["bench"] });

  const stubPort = await freePort();
  const stub = spawn(process.execPath, ["--import", "tsx", stubPath, "--port", String(stubPort), ...stubArgs], { stdio: "ignore" });
  children.push(stub);
  const stubOrigin = `http://127.0.0.1:${stubPort}`;
  await until(async () => ((await fetch(`${stubOrigin}/health`).catch(() => undefined))?.ok ? true : undefined), "the stub");

  const close = async () => {
    stub.kill();
    agentChild.kill("SIGTERM");
    await server.call("stop").catch(() => undefined);
    await server.exit();
    rmSync(dir, { recursive: true, force: true });
  };
  return { info, server, secret, pids: { server: info.pid, agent: agentChild.pid!, stub: stub.pid! }, stubOrigin, transport, close };
}

// BENCH_CPU_PROF=<dir>: the control plane and the agent write a CPU profile of their whole life
// there when they exit (node --cpu-prof), to read by self time (bench/support/read-profile.ts).
const profileDir = process.env.BENCH_CPU_PROF ?? "";
const profileFlags = profileDir === "" ? [] : ["--cpu-prof", `--cpu-prof-dir=${profileDir}`];

const stubPath = fileURLToPath(new URL("./stub-openai.ts", import.meta.url));

/** An openai-http profile and a deployment "bench" on the node, READY. */
async function deployStub(admin: Client<typeof AdminService>, nodeId: string, dir: string): Promise<void> {
  await admin.createRuntimeProfile({ name: "stub", engine: EngineKind.OPENAI_HTTP });
  // The deployment's "model" is a small file in the artifact store: the stub runtime ignores it.
  const model = Buffer.from("stub model");
  const repository = "bench/stub";
  const commit = "a".repeat(40);
  await admin.uploadArtifactChunk({
    repository,
    commit,
    path: "model.bin",
    sizeBytes: BigInt(model.length),
    sha256: createHash("sha256").update(model).digest("hex"),
    offset: 0n,
    data: model,
  });
  const spec = { name: "bench", nodeId, runtimeProfile: "stub", repository, commit, targetRoot: dir, maxInFlight: 1024 };
  // A node whose first heartbeat is not stored yet does not fit: asked again until it does.
  await until(
    () =>
      admin.createDeployment(spec).then(
        () => true,
        (err: unknown) => {
          if (err instanceof ConnectError && err.code === Code.FailedPrecondition) return undefined;
          throw err;
        },
      ),
    "placement on the node",
  );
  await until(
    async () =>
      (await admin.getDeployment({ deployment: "bench" })).deployment?.deployment?.state === DeploymentState.READY ? true : undefined,
    "the deployment READY",
  );
}

/** Polls `check` every 100 ms until it gives a value, for at most 60 s. */
export async function until<T>(check: () => Promise<T | undefined>, what: string): Promise<T> {
  const end = Date.now() + 60_000;
  for (;;) {
    const v = await check();
    if (v !== undefined) return v;
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const s = createServer();
    s.once("error", reject);
    s.listen(0, "127.0.0.1", () => {
      const address = s.address();
      s.close(() => (typeof address === "object" && address ? resolve(address.port) : reject(new Error("no port"))));
    });
  });
}
