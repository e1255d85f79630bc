// Bench-only: the whole serving path around a real model. A control plane (its own process), the
// real agent (`agent/main.ts run`, its own process, serving runtimes), the model pushed into the
// artifact store, a llama.cpp runtime profile and deployment "bench" READY on the node (or on
// several nodes, one agent each), and a service key: the OpenAI API at the control plane, reached
// over TLS with the key.
import { type ChildProcess, spawn } from "node:child_process";
import { createHash } from "node:crypto";
import { once } from "node:events";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { createClient, type Client } from "@connectrpc/connect";
import type { MessageInitShape } from "@bufbuild/protobuf";
import { Agent, type Dispatcher, setGlobalDispatcher } from "undici";
import { grpcTransport } from "../../common/http2-sessions.js";
import { AdminService, type DeploymentAutoscalingSchema } from "../../gen/proto/modelforge/admin/v1/admin_pb.js";
import { DeploymentState } from "../../gen/proto/modelforge/deployment/v1/deployment_pb.js";
import { EngineKind } from "../../gen/proto/modelforge/jobs/v1/jobs_pb.js";
import { enrollNode } from "../../agent/enroll.js";
import { forkTs, Rpc } from "./ipc.js";
import { benchServerEnv } from "./server-env.js";
import { serverNodeFlags } from "../../server/tuning.js";
import { header } from "./stub-deployment.js";

const adminKey = "bench-admin-key-0123456789abcdef";
const chunk = 1024 * 1024;

export interface ApiStack {
  url: string;
  headers: Record<string, string>;
  /** Trusts this stack's CA: for undici's fetch when several stacks run at once (the global one trusts the last started). */
  dispatcher: Dispatcher;
  admin: Client<typeof AdminService>;
  stop(): Promise<void>;
}

export interface ApiStackOptions {
  modelPath: string;
  threads: number;
  parallel: number;
  context: number;
  /** The deployment's autoscaling; unset for one fixed replica. */
  autoscaling?: MessageInitShape<typeof DeploymentAutoscalingSchema>;
  /** More of the control plane's environment (MODELFORGE_AUTOSCALE_INTERVAL, ...). */
  serverEnv?: Record<string, string>;
  /** Replicas the one node may hold (default 1). */
  maxPerNode?: number;
  /** Nodes, one agent each (default 1); with more, the deployment has one replica on each. */
  agents?: number;
}

export async function startApiStack(o: ApiStackOptions): Promise<ApiStack> {
  const dir = mkdtempSync(join(tmpdir(), "mf-bench-api-"));
  const root = join(dir, "artifacts");
  const serverChild = forkTs(new URL("./invoke-server.ts", import.meta.url), {
    nodeFlags: serverNodeFlags,
    env: benchServerEnv(dir, adminKey, { MODELFORGE_LOG_LEVEL: "warn", MODELFORGE_APPROVED_ROOTS: root, ...o.serverEnv }),
  });
  const server = new Rpc(serverChild, "server");
  await server.waitFor("ready");
  const info = await server.call<{ url: string; caPem: string; fingerprint: string }>("info");
  const admin = createClient(
    AdminService,
    grpcTransport({ baseUrl: info.url, nodeOptions: { ca: info.caPem }, interceptors: [header("x-modelforge-admin-token", adminKey)] }),
  );
  const agentCount = o.agents ?? 1;
  const agents: BenchAgent[] = [];
  for (let n = 0; n < agentCount; n++) agents.push(await startAgent(admin, info, `bench-${n}`, join(dir, `agent-${n}`), root));

  const data = readFileSync(o.modelPath);
  const sha256 = createHash("sha256").update(data).digest("hex");
  const at = { repository: "bench/model", commit: "b".repeat(40), path: "model.gguf" };
  for (let offset = 0; offset < data.length; offset += chunk) {
    const part = data.subarray(offset, offset + chunk);
    await admin.uploadArtifactChunk({ ...at, sizeBytes: BigInt(data.length), sha256, offset: BigInt(offset), data: part });
  }
  await admin.createRuntimeProfile({
    name: "bench",
    engine: EngineKind.LLAMA_CPP,
    contextSize: o.context,
    threads: o.threads,
    parallel: o.parallel,
  });
  await admin.createDeployment({
    name: "bench",
    ...(agentCount === 1 ? { nodeId: agents[0]!.nodeId } : { replicas: agentCount, maxPerNode: 1 }),
    runtimeProfile: "bench",
    repository: at.repository,
    commit: at.commit,
    targetRoot: root,
    maxInFlight: 1024,
    ...(o.autoscaling !== undefined ? { autoscaling: o.autoscaling } : {}),
    ...(o.maxPerNode !== undefined ? { maxPerNode: o.maxPerNode } : {}),
  });
  await until(
    async () =>
      (await admin.getDeployment({ deployment: "bench" })).deployment?.deployment?.state === DeploymentState.READY ? true : undefined,
    "the deployment READY",
    180_000,
  );
  const { secret } = await admin.createServiceKey({ name: "bench", deployments: ["bench"] });
  const dispatcher = new Agent({ connect: { ca: info.caPem }, keepAliveTimeout: 30_000 });
  setGlobalDispatcher(dispatcher);
  return {
    url: info.url,
    headers: { authorization: `Bearer ${secret}` },
    dispatcher,
    admin,
    async stop() {
      await Promise.all(
        agents.map(async ({ process: agent }) => {
          agent.kill("SIGTERM");
          await once(agent, "exit");
        }),
      );
      await server.call("stop").catch(() => undefined);
      await server.exit();
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

interface BenchAgent {
  nodeId: string;
  process: ChildProcess;
}

/** Node `name` enrolled with its state under `dir`, its real agent serving runtimes, waited online with telemetry. */
async function startAgent(
  admin: Client<typeof AdminService>,
  info: { url: string; fingerprint: string },
  name: string,
  dir: string,
  root: string,
): Promise<BenchAgent> {
  const token = await admin.createEnrollmentToken({ nodeName: name });
  const statePath = join(dir, "state.json");
  const state = await enrollNode({ serverUrl: info.url, token: token.token, caFingerprint: info.fingerprint, statePath });
  const agent = spawn(
    process.execPath,
    ["--import", "tsx", fileURLToPath(new URL("../../agent/main.ts", import.meta.url)), "run", "--state", statePath],
    {
      env: {
        ...process.env,
        MODELFORGE_AGENT_RUNTIMES: "on",
        MODELFORGE_AGENT_ARTIFACT_SOURCES: "control-plane",
        MODELFORGE_AGENT_ARTIFACT_ROOTS: root,
        MODELFORGE_LOG_LEVEL: "warn",
      },
      stdio: ["ignore", "ignore", "inherit"],
    },
  );
  await until(async () => {
    const got = await admin.getNode({ nodeId: state.nodeId });
    return got.node?.capabilities.includes("deployment.load.v1") && got.telemetry !== undefined ? true : undefined;
  }, "the agent");
  return { nodeId: state.nodeId, process: agent };
}

async function until<T>(check: () => Promise<T | undefined>, what: string, timeoutMs = 60_000): Promise<T> {
  const end = Date.now() + timeoutMs;
  for (;;) {
    const v = await check().catch(() => undefined);
    if (v !== undefined) return v;
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 200));
  }
}
