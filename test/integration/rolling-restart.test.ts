// A rolling restart under load cuts nothing (always PostgreSQL: replicas need it). Two control-plane
// processes on one database and one CA; a real agent process holding the tiny GGUF dials them
// through a TCP balancer (first replica that accepts); clients stream and call continuously,
// spread over both replicas, and go to the other one on `unavailable` before any answer. Each
// replica in turn gets SIGTERM while streams are in flight, exits, and is started again on its
// port. Counted: streams cut (an error, or an end without the final usage chunk, after an answer
// began) and calls that failed for good; both must be 0.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { setTimeout as delay } from "node:timers/promises";
import { Code, ConnectError, createClient, type Client } from "@connectrpc/connect";
import { grpcTransport } from "../../common/http2-sessions.js";
import { codeName } from "../../common/codes.js";
import { DeploymentService } from "../../gen/proto/modelforge/deployment/v1/deployment_pb.js";
import { EngineKind } from "../../gen/proto/modelforge/jobs/v1/jobs_pb.js";
import { writeTinyLlamaGguf } from "../../scripts/gguf.js";
import { createTestDatabase, type TestDatabase } from "../support/db.js";
import { spawnServer, type AgentProcess, type ServerProcess } from "../support/process.js";
import { adminClientAt, enrollAt } from "../support/agent.js";
import { tcpBalancer, type TcpBalancer } from "../support/balancer.js";
import { freePort } from "../support/ports.js";
import { testAdminKey } from "../support/server.js";
import { serveTiny, spawnServingAgent } from "../support/serving.js";
import { waitFor } from "../support/wait.js";

let db: TestDatabase;
let dir: string;
let balancer: TcpBalancer;
let agent: AgentProcess;
let secret: string;
const replicas: { name: string; port: number; process: ServerProcess }[] = [];

const replicaEnv = (name: string, port: number) => ({
  DATABASE_URL: db.databaseUrl!,
  MODELFORGE_PORT: String(port),
  MODELFORGE_DATA_DIR: join(dir, name),
  MODELFORGE_CERTS_DIR: join(dir, "certs"),
  MODELFORGE_OPERATOR_API_KEY: testAdminKey,
  MODELFORGE_APPROVED_ROOTS: dir,
  MODELFORGE_ARTIFACT_DIR: join(dir, "store"),
  MODELFORGE_HEARTBEAT_INTERVAL: "200ms",
  MODELFORGE_LIVENESS_FLUSH_INTERVAL: "100ms",
  MODELFORGE_RECONCILE_INTERVAL: "100ms",
  // Far more than a generation takes on a busy machine: nothing should need cutting.
  MODELFORGE_SHUTDOWN_GRACE: "60s",
});

beforeAll(async () => {
  db = await createTestDatabase("postgres");
  dir = mkdtempSync(join(tmpdir(), "mf-rolling-"));
  const model = await writeTinyLlamaGguf(join(dir, "tiny.gguf"), { contextLength: 8192 });
  for (const name of ["a", "b"]) {
    const port = await freePort();
    const process = spawnServer(replicaEnv(name, port));
    replicas.push({ name, port, process });
    await process.ready; // one after the other: the second reuses the CA the first made
  }
  balancer = await tcpBalancer(replicas.map((r) => r.port));
  const admin = adminClientAt(await replicas[0]!.process.ready, join(dir, "certs", "ca.crt"), testAdminKey);
  const node = await enrollAt(balancer.url, admin, "rolling");
  agent = await spawnServingAgent(admin, node, dir);
  await admin.createRuntimeProfile({ name: "tiny-cpu", engine: EngineKind.LLAMA_CPP, contextSize: 8192, threads: 1 });
  await serveTiny(admin, { nodeId: node.nodeId, commit: "e".repeat(40), root: dir, file: join(dir, "tiny.gguf"), sha256: model.sha256 });
  secret = (await admin.createServiceKey({ name: "svc", deployments: ["tiny"] })).secret;
}, 240_000);

afterAll(async () => {
  await agent?.stop();
  for (const r of replicas) r.process.child.kill("SIGKILL");
  await Promise.all(replicas.map((r) => r.process.exited));
  await balancer?.close();
  await db?.cleanup();
  if (dir) rmSync(dir, { recursive: true, force: true });
});

describe("a rolling restart of two replicas under streaming load", () => {
  it("cuts no stream and fails no call", async () => {
    const load = startLoad(replicas.map((r) => r.process.ready));
    try {
      await waitFor(() => load.stats.streams >= 3 && load.stats.unary >= 1, { what: "load flowing", timeout: 60_000 });
      for (const replica of replicas) {
        // Streams in flight when the signal comes: the drain has something to wait for.
        await waitFor(() => load.inFlight() >= 2, { what: "streams in flight", timeout: 60_000 });
        load.stats.inFlightAtSignal.push(load.inFlight());
        replica.process.child.kill("SIGTERM");
        expect(await replica.process.exited).toBe(0);
        expect(replica.process.stdout()).not.toContain("shutdown grace ran out");
        replica.process = spawnServer(replicaEnv(replica.name, replica.port));
        await replica.process.ready;
        // Served again after the restart, before the next replica goes.
        const done = load.stats.streams + load.stats.unary;
        await waitFor(() => load.stats.streams + load.stats.unary >= done + 4, { what: "load flowing after the restart", timeout: 90_000 });
      }
    } finally {
      await load.stop();
    }
    const { stats } = load;
    expect(stats.errors, JSON.stringify(stats)).toEqual([]);
    expect(stats.cut).toBe(0);
    expect(stats.failedUnary).toBe(0);
    expect(stats.failedStreams).toBe(0);
    expect(stats.inFlightAtSignal.every((n) => n >= 2)).toBe(true);
    // The clients did see the restarts, and went to the other replica.
    expect(stats.rerouted).toBeGreaterThan(0);
    expect(stats.streams).toBeGreaterThan(10);
  }, 420_000);
});

interface LoadStats {
  streams: number;
  unary: number;
  cut: number;
  failedStreams: number;
  failedUnary: number;
  rerouted: number;
  inFlightAtSignal: number[];
  errors: string[];
}

/** Three stream workers and one unary worker, each calling again as soon as its call ends. */
function startLoad(urls: readonly Promise<string>[]) {
  const stats: LoadStats = {
    streams: 0,
    unary: 0,
    cut: 0,
    failedStreams: 0,
    failedUnary: 0,
    rerouted: 0,
    inFlightAtSignal: [],
    errors: [],
  };
  const clients = Promise.all(
    urls.map(async (u) => createClient(DeploymentService, grpcTransport({ baseUrl: await u, nodeOptions: { ca: caPem() } }))),
  );
  let streaming = 0;
  let stopped = false;
  let turn = 0;
  const worker = async (stream: boolean) => {
    const c = await clients;
    while (!stopped) {
      const first = turn++ % c.length;
      if (stream) await streamOnce(c, first, stats, (d) => (streaming += d));
      else await unaryOnce(c, first, stats);
    }
  };
  const workers = [worker(true), worker(true), worker(true), worker(false)];
  return {
    stats,
    inFlight: () => streaming,
    async stop() {
      stopped = true;
      await Promise.all(workers);
    },
  };
}

const request = (max: number) => ({
  deploymentId: "tiny",
  payload: Buffer.from(
    JSON.stringify({ prompt: "The quick brown fox", max_tokens: max, temperature: 0, stream_options: { include_usage: true } }),
  ),
});
const headers = () => ({ authorization: `Bearer ${secret}` });
/** How long one call may keep going to the other replica: the agent moving replicas included. */
const retryForMs = 120_000;

/**
 * Whether to go to the other replica: `unavailable`, or a stream the server refused unopened
 * (HTTP/2 REFUSED_STREAM after its GOAWAY: never processed, so safe to send again; grpc-js calls
 * it unavailable, connect-node internal).
 */
function elsewhere(e: ConnectError): boolean {
  return e.code === Code.Unavailable || (e.code === Code.Internal && e.rawMessage.includes("NGHTTP2_REFUSED_STREAM"));
}

/** One streamed completion, to another replica on `unavailable` before its first chunk. */
async function streamOnce(c: Client<typeof DeploymentService>[], first: number, stats: LoadStats, inFlight: (d: number) => void) {
  const until = performance.now() + retryForMs;
  for (let at = first; ; at = (at + 1) % c.length) {
    const { chunks, usage, error } = await streamCall(c[at]!, inFlight);
    if (error === undefined && usage) {
      stats.streams++;
      return;
    }
    const why = error === undefined ? "ended without its final usage chunk" : `${codeName(error.code)} ${error.rawMessage}`;
    if (chunks > 0) {
      stats.cut++;
      stats.errors.push(`stream cut after ${chunks} chunks: ${why}`);
      return;
    }
    if (error === undefined || !elsewhere(error) || performance.now() > until) {
      stats.failedStreams++;
      stats.errors.push(`stream failed: ${why}`);
      return;
    }
    stats.rerouted++;
    await delay(50);
  }
}

/** One stream to its end: how many chunks came, whether the last one carried the usage, the error if any. */
async function streamCall(client: Client<typeof DeploymentService>, inFlight: (d: number) => void) {
  let chunks = 0;
  let usage = false;
  try {
    for await (const m of client.invokeStream(request(32), { headers: headers() })) {
      if (chunks++ === 0) inFlight(1);
      usage = JSON.parse(Buffer.from(m.payload).toString("utf8")).usage?.completion_tokens > 0;
    }
    return { chunks, usage, error: undefined };
  } catch (err) {
    return { chunks, usage, error: ConnectError.from(err) };
  } finally {
    if (chunks > 0) inFlight(-1);
  }
}

/** One unary completion, to another replica on `unavailable`. */
async function unaryOnce(c: Client<typeof DeploymentService>[], first: number, stats: LoadStats) {
  const until = performance.now() + retryForMs;
  for (let at = first; ; at = (at + 1) % c.length) {
    try {
      await c[at]!.invoke(request(8), { headers: headers() });
      stats.unary++;
      return;
    } catch (err) {
      const e = ConnectError.from(err);
      if (!elsewhere(e) || performance.now() > until) {
        stats.failedUnary++;
        stats.errors.push(`unary failed: ${codeName(e.code)} ${e.rawMessage}`);
        return;
      }
      stats.rerouted++;
      await delay(50);
    }
  }
}

function caPem(): string {
  return readFileSync(join(dir, "certs", "ca.crt"), "utf8");
}
