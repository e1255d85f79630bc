// GPUs assigned to replicas, end to end: a real server, a real agent whose nvidia-smi is the fake
// one (two 24 GiB GPUs), and an openai-http template whose server is a stub recording what it was
// started with. Placement picks the node and its GPUs, the replica records them, the lease carries
// them, and the runtime sees only its own: CUDA_VISIBLE_DEVICES, {gpus} and {gpu_count}.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createHash, randomUUID } from "node:crypto";
import { mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { JobState } from "../../../gen/proto/modelforge/admin/v1/admin_pb.js";
import { DeploymentState } from "../../../gen/proto/modelforge/deployment/v1/deployment_pb.js";
import { EngineKind, JobFailureCode } from "../../../gen/proto/modelforge/jobs/v1/jobs_pb.js";
import { startTestServer, testAdminKey, type TestServer } from "../../support/server.js";
import { enrollTestNode, eventually, type TestNode } from "../../support/node.js";
import { spawnServingAgent, storeArtifact } from "../../support/serving.js";
import { isAlive, type AgentProcess } from "../../support/process.js";
import { forgeAt, type ForgeRun } from "../../support/forge.js";
import { jobToEnd } from "../../support/jobs.js";

const GiB = 2 ** 30;
const stub = fileURLToPath(new URL("../../fixtures/gpu-runtime/stub-server.mjs", import.meta.url));
const repository = "acme/vllm-model";
const commit = "c".repeat(40);

let ts: TestServer;
let base: string;
let root: string;
let records: string;
let node: TestNode;
let agent: AgentProcess;
let forge: (args: string[]) => Promise<ForgeRun>;
let gpuDir: string;
let weightsSha256: string;

interface Started {
  argv: string[];
  CUDA_VISIBLE_DEVICES: string | null;
  CUDA_DEVICE_ORDER: string | null;
}
/** Each runtime start, with the pid it ran as (its record's file name). */
const started = (): (Started & { pid: number })[] =>
  readdirSync(records).map((f) => ({ ...(JSON.parse(readFileSync(join(records, f), "utf8")) as Started), pid: Number.parseInt(f, 10) }));

beforeAll(async () => {
  base = mkdtempSync(join(tmpdir(), "mf-gpus-"));
  root = join(base, "models");
  records = join(base, "records");
  mkdirSync(root);
  mkdirSync(records);
  // Two GPUs of 24 GiB, 1 GiB in use on each.
  gpuDir = join(base, "gpu");
  mkdirSync(gpuDir);
  writeFileSync(
    join(gpuDir, "inventory.csv"),
    "GPU-aaaaaaaa-0000, 0, 00000000:3B:00.0, NVIDIA L4, 24576, 550.54.15\nGPU-bbbbbbbb-1111, 1, 00000000:5E:00.0, NVIDIA L4, 24576, 550.54.15\n",
  );
  writeFileSync(join(gpuDir, "telemetry.csv"), "GPU-aaaaaaaa-0000, 0, 1024, 40, 30\nGPU-bbbbbbbb-1111, 0, 1024, 41, 31\n");
  const template = join(base, "openai-http.json");
  writeFileSync(
    template,
    JSON.stringify({
      command: [process.execPath, stub, "--model", "{model}", "--port", "{port}", "--gpus={gpus}", "--tensor-parallel-size", "{gpu_count}"],
      env: { STUB_RECORD_DIR: records, CUDA_VISIBLE_DEVICES: "the-template-does-not-decide" },
    }),
  );

  ts = await startTestServer({
    MODELFORGE_HEARTBEAT_INTERVAL: "200ms",
    // Each telemetry round also sends the inventory when it changed: a GPU going missing is seen soon.
    MODELFORGE_TELEMETRY_INTERVAL: "500ms",
    MODELFORGE_LEASE_DURATION: "20s",
    MODELFORGE_APPROVED_ROOTS: root,
  });
  forge = forgeAt(ts.url, ts.caPem, base, testAdminKey);
  const weights = Buffer.from("not really weights");
  const file = join(base, "model.bin");
  writeFileSync(file, weights);
  weightsSha256 = createHash("sha256").update(weights).digest("hex");
  await storeArtifact(ts.admin, { repository, commit, path: "model.bin" }, file, weightsSha256);
  await ts.admin.createRuntimeProfile({ name: "gpu-16g", engine: EngineKind.OPENAI_HTTP, gpuCount: 1, gpuMemoryBytes: BigInt(16 * GiB) });
  await ts.admin.createRuntimeProfile({ name: "gpu-30g", engine: EngineKind.OPENAI_HTTP, gpuCount: 1, gpuMemoryBytes: BigInt(30 * GiB) });
  node = await enrollTestNode(ts, "gpu-node");
  agent = await spawnServingAgent(ts.admin, node, root, {
    FAKE_NVIDIA_SMI_DIR: gpuDir,
    MODELFORGE_AGENT_OPENAI_HTTP_TEMPLATE: template,
  });
  // Placement reads each GPU's free memory from telemetry: wait for both GPUs in it.
  await eventually(
    async () => (await ts.admin.getNode({ nodeId: node.nodeId })).telemetry?.telemetry?.gpus.length === 2,
    60_000,
    "GPU telemetry of both GPUs",
  );
}, 180_000);

afterAll(async () => {
  // Stopped, not killed: a killed agent leaves its runtimes running (nothing restarts it here to reap them).
  await agent?.stop().catch(() => agent?.kill());
  await ts?.stop();
  if (base) rmSync(base, { recursive: true, force: true });
});

const deployment = async (name: string) => (await ts.admin.getDeployment({ deployment: name })).deployment!;

describe("GPUs assigned to replicas", () => {
  it("a replica too large for either GPU's free memory is not placed there, and the reason has the numbers", async () => {
    await ts.admin.createDeployment({ name: "huge", runtimeProfile: "gpu-30g", repository, commit, targetRoot: root, nodeId: node.nodeId });
    const reason = await eventually(async () => (await deployment("huge")).replicas[0]?.reason || undefined, 60_000, "a pending reason");
    expect(reason).toBe(`no node fits: node ${node.nodeId}: has 23.0 GiB of GPU memory free on the emptiest GPU, needs 30.0 GiB`);
    expect((await deployment("huge")).replicas[0]!.state).toBe(DeploymentState.PENDING);
    await ts.admin.deleteDeployment({ deployment: "huge" });
  });

  it("two replicas on a 2-GPU node get different GPUs, and each runtime sees only its own", async () => {
    // Two deployments' replicas: GPUs are the node's to share out, whichever deployment asks.
    for (const name of ["vllm-a", "vllm-b"]) {
      await ts.admin.createDeployment({ name, runtimeProfile: "gpu-16g", repository, commit, targetRoot: root, nodeId: node.nodeId });
    }
    const replicas = await eventually(
      async () => {
        const rs = (await Promise.all(["vllm-a", "vllm-b"].map(deployment))).map((d) => d.replicas[0]);
        return rs.every((r) => r?.state === DeploymentState.READY) ? rs.map((r) => r!) : undefined;
      },
      120_000,
      "both replicas READY",
    );
    const assigned = replicas.map((r) => r.gpus.map((g) => `${g.index}:${g.uuid}`));
    expect(assigned.flat().sort()).toEqual(["0:GPU-aaaaaaaa-0000", "1:GPU-bbbbbbbb-1111"]);

    // What each runtime was started with: its own device, in CUDA_VISIBLE_DEVICES and in {gpus},
    // each placeholder inside its own argv element; the template's env does not decide devices.
    const runs = started().sort((a, b) => (a.CUDA_VISIBLE_DEVICES ?? "").localeCompare(b.CUDA_VISIBLE_DEVICES ?? ""));
    expect(runs.map((r) => r.CUDA_VISIBLE_DEVICES)).toEqual(["0", "1"]);
    expect(runs.map((r) => r.CUDA_DEVICE_ORDER)).toEqual(["PCI_BUS_ID", "PCI_BUS_ID"]);
    for (const [k, r] of runs.entries()) {
      expect(r.argv).toContain(`--gpus=${k}`);
      expect(r.argv.slice(r.argv.indexOf("--tensor-parallel-size"))).toEqual(["--tensor-parallel-size", "1"]);
    }

    const shown = await forge(["deployments", "get", "vllm-a"]);
    expect(shown.code, shown.stderr).toBe(0);
    expect(shown.stdout).toMatch(/REPLICA\s+REVISION\s+NODE\s+GPUS\s+STATE/);
    expect(shown.stdout).toContain(assigned[0]![0]!);
  });

  it("a third replica finds both GPUs held, and says so", async () => {
    await ts.admin.createDeployment({
      name: "vllm-c",
      runtimeProfile: "gpu-16g",
      repository,
      commit,
      targetRoot: root,
      nodeId: node.nodeId,
    });
    const reason = await eventually(async () => (await deployment("vllm-c")).replicas[0]?.reason || undefined, 60_000, "a reason");
    expect(reason).toBe(`no node fits: node ${node.nodeId}: has 0 GPUs it may use (present and not held by another replica), needs 1`);
    await ts.admin.deleteDeployment({ deployment: "vllm-c" });
  });

  it("a load naming other GPUs than the runtime the agent holds for that replica replaces it", async () => {
    const load = (gpus: { uuid: string; index: number }[]) =>
      jobToEnd(
        ts.admin,
        node.nodeId,
        {
          kind: {
            case: "deploymentLoad",
            value: {
              deploymentId,
              revision: 1n,
              replica: 0,
              runtimeProfile: "gpu-16g",
              artifacts: [{ path: join(root, repository, commit, "model.bin"), sha256: weightsSha256 }],
              gpus,
            },
          },
        },
        60_000,
      );
    const deploymentId = randomUUID();
    const before = new Set(started().map((r) => r.pid));
    expect((await load([{ uuid: "GPU-aaaaaaaa-0000", index: 0 }])).state).toBe(JobState.SUCCEEDED);
    const first = started().filter((r) => !before.has(r.pid));
    expect(first.map((r) => r.CUDA_VISIBLE_DEVICES)).toEqual(["0"]);
    // The same GPUs again: the same runtime (a load is idempotent).
    expect((await load([{ uuid: "GPU-aaaaaaaa-0000", index: 0 }])).state).toBe(JobState.SUCCEEDED);
    expect(started().filter((r) => !before.has(r.pid))).toHaveLength(1);
    // Other GPUs: the old runtime gives way to a new one on them.
    expect((await load([{ uuid: "GPU-bbbbbbbb-1111", index: 1 }])).state).toBe(JobState.SUCCEEDED);
    const second = started().filter((r) => !before.has(r.pid) && r.pid !== first[0]!.pid);
    expect(second.map((r) => r.CUDA_VISIBLE_DEVICES)).toEqual(["1"]);
    await eventually(() => !isAlive(first[0]!.pid), 30_000, "the runtime on the old GPUs stopped");
    await jobToEnd(
      ts.admin,
      node.nodeId,
      { kind: { case: "deploymentUnload", value: { deploymentId, revision: 1n, replica: 0 } } },
      60_000,
    );
  });

  it("a GPU reported missing fails its replica over: it leaves the node and waits for a GPU", async () => {
    const onB = async () => {
      for (const name of ["vllm-a", "vllm-b"]) if ((await deployment(name)).replicas[0]!.gpus[0]?.uuid === "GPU-bbbbbbbb-1111") return name;
      return undefined;
    };
    const name = (await onB())!;
    expect(name).toBeDefined();
    const onMissing = started().find((r) => r.CUDA_VISIBLE_DEVICES === "1" && isAlive(r.pid));
    expect(onMissing).toBeDefined();
    // GPU 1 falls off the bus: nvidia-smi lists only GPU 0 from now on.
    writeFileSync(join(gpuDir, "inventory.csv"), "GPU-aaaaaaaa-0000, 0, 00000000:3B:00.0, NVIDIA L4, 24576, 550.54.15\n");
    writeFileSync(join(gpuDir, "telemetry.csv"), "GPU-aaaaaaaa-0000, 0, 1024, 40, 30\n");
    const replica = await eventually(
      async () => {
        const r = (await deployment(name)).replicas[0]!;
        // Its reason says why it left the node until a placement pass has tried again.
        return r.state === DeploymentState.PENDING && r.reason.startsWith("no node fits") ? r : undefined;
      },
      60_000,
      "the replica on the missing GPU back to PENDING, placement tried again",
    );
    expect(replica.gpus).toEqual([]);
    expect(replica.nodeId).toBe("");
    // GPU 0 is the other deployment's: nothing is left for it.
    expect(replica.reason).toBe(
      `no node fits: node ${node.nodeId}: has 0 GPUs it may use (present and not held by another replica), needs 1`,
    );
    const events = (await ts.admin.getDeployment({ deployment: name })).events.map((e) => e.reason);
    expect(events).toContain(`GPU GPU-bbbbbbbb-1111 of node ${node.nodeId} is missing: placing it again`);

    // The node is up: it is told to stop the runtime confined to the missing GPU.
    await eventually(() => !isAlive(onMissing!.pid), 30_000, "the runtime confined to the missing GPU stopped");

    // GPU 0 is freed: the replica is placed on it, on the same node and in the same slot.
    await ts.admin.deleteDeployment({ deployment: name === "vllm-a" ? "vllm-b" : "vllm-a" });
    const moved = await eventually(
      async () => {
        const r = (await deployment(name)).replicas[0]!;
        return r.state === DeploymentState.READY ? r : undefined;
      },
      60_000,
      "the replica READY on GPU 0 of the same node",
    );
    expect(moved.nodeId).toBe(node.nodeId);
    expect(moved.gpus.map((g) => `${g.index}:${g.uuid}`)).toEqual(["0:GPU-aaaaaaaa-0000"]);
    const onZero = started().filter((r) => r.CUDA_VISIBLE_DEVICES === "0" && isAlive(r.pid));
    expect(onZero).toHaveLength(1);
  });

  it("the agent refuses a lease naming a GPU it does not have, with a typed failure", async () => {
    const job = await jobToEnd(
      ts.admin,
      node.nodeId,
      {
        kind: {
          case: "deploymentLoad",
          value: {
            deploymentId: randomUUID(),
            revision: 1n,
            runtimeProfile: "gpu-16g",
            artifacts: [{ path: join(root, repository, commit, "model.bin"), sha256: "0".repeat(64) }],
            gpus: [{ uuid: "GPU-not-here", index: 7 }],
          },
        },
      },
      60_000,
    );
    expect(job.state).toBe(JobState.FAILED);
    expect(job.failure).toMatchObject({ code: JobFailureCode.GPU_UNAVAILABLE, retryable: false });
    expect(job.failure!.message).toBe("GPU GPU-not-here (index 7) is not on this node");
  });
});
