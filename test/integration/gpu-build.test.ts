// The GPU agent artefact (dist/agent-gpu/, `npm run build -- --gpu`) on this CPU machine: its own
// agent bundle runs against a real control plane with a fake nvidia-smi listing one GPU, so it
// advertises llama.cpp+cuda (it finds the CUDA packages it carries), placement gives the replica
// that GPU, and the llama-server it starts would load the CUDA backend but finds no driver (this
// machine has no libcuda), says so in one line in the deployment's logs and serves the tiny model
// on the CPU. The test
// builds nothing and downloads nothing: CI builds the artefact first (.ci/run); without it, it is
// skipped, saying so.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { spawnSync } from "node:child_process";
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Code, ConnectError } from "@connectrpc/connect";
import { EngineKind } from "../../gen/proto/modelforge/jobs/v1/jobs_pb.js";
import { writeTinyLlamaGguf } from "../../scripts/gguf.js";
import { startTestServer, type TestServer } from "../support/server.js";
import { enrollTestNode, eventually, type TestNode } from "../support/node.js";
import { repoRoot, type AgentProcess } from "../support/process.js";
import { serveTiny, spawnServingAgent } from "../support/serving.js";
import { completion, serviceClient } from "../support/usage-load.js";

const artefact = join(repoRoot, "dist/agent-gpu");
const built = existsSync(join(artefact, "package.json"));
const fakeNvidiaSmi = join(repoRoot, "test/fixtures/nvidia-smi");

let ts: TestServer;
let base: string;
let node: TestNode;
let agent: AgentProcess;

describe.skipIf(!built)(
  `the GPU agent artefact on a machine without CUDA${built ? "" : " (skipped: dist/agent-gpu is not built: npm run build -- --gpu)"}`,
  () => {
    beforeAll(async () => {
      base = mkdtempSync(join(tmpdir(), "mf-gpu-build-"));
      const root = join(base, "models");
      mkdirSync(root);
      const gpuDir = join(base, "gpu");
      mkdirSync(gpuDir);
      // One 24 GiB GPU, 1 GiB in use.
      writeFileSync(join(gpuDir, "inventory.csv"), "GPU-aaaaaaaa-0000, 0, 00000000:3B:00.0, NVIDIA L4, 24576, 550.54.15\n");
      writeFileSync(join(gpuDir, "telemetry.csv"), "GPU-aaaaaaaa-0000, 0, 1024, 40, 30\n");
      ts = await startTestServer({
        MODELFORGE_HEARTBEAT_INTERVAL: "200ms",
        MODELFORGE_TELEMETRY_INTERVAL: "500ms",
        MODELFORGE_APPROVED_ROOTS: root,
      });
      node = await enrollTestNode(ts, "gpu-artefact");
      // serveTiny serves profile "tiny-cpu": here it offloads every layer to one GPU.
      await ts.admin.createRuntimeProfile({
        name: "tiny-cpu",
        engine: EngineKind.LLAMA_CPP,
        contextSize: 512,
        threads: 1,
        gpuCount: 1,
        gpuLayersAll: true,
      });
      agent = await spawnServingAgent(ts.admin, node, root, { FAKE_NVIDIA_SMI_DIR: gpuDir }, [join(artefact, "modelforge-agent.mjs")]);
      await eventually(
        async () => (await ts.admin.getNode({ nodeId: node.nodeId })).telemetry?.telemetry?.gpus.length === 1,
        60_000,
        "the GPU in telemetry",
      );
      // Without it the offloading profile is placed nowhere: fail here, saying why, not at READY.
      const { engines } = (await ts.admin.getNode({ nodeId: node.nodeId })).node!;
      if (!engines.includes("llama.cpp+cuda"))
        throw new Error(`the artefact's agent does not advertise llama.cpp+cuda: ${engines.join(", ")}`);
      const file = join(base, "tiny.gguf");
      const { sha256 } = await writeTinyLlamaGguf(file);
      await serveTiny(ts.admin, { nodeId: node.nodeId, commit: "a".repeat(40), root, file, sha256 });
    }, 240_000);

    afterAll(async () => {
      await agent?.stop();
      await ts?.stop();
      if (base) rmSync(base, { recursive: true, force: true });
    });

    it("is the GPU build, and its agent advertises llama.cpp+cuda on a node whose nvidia-smi lists a GPU", async () => {
      expect(JSON.parse(readFileSync(join(artefact, "package.json"), "utf8")).name).toBe("modelforge-agent-gpu");
      expect((await ts.admin.getNode({ nodeId: node.nodeId })).node!.engines).toContain("llama.cpp+cuda");
    });

    it("places the replica on the GPU, falls back to the CPU because the driver is missing, and serves", async () => {
      const replica = (await ts.admin.getDeployment({ deployment: "tiny" })).deployment!.replicas[0]!;
      expect(replica.gpus.map((g) => `${g.index}:${g.uuid}`)).toEqual(["0:GPU-aaaaaaaa-0000"]);

      const { secret } = await ts.admin.createServiceKey({ name: "gpu-build", deployments: ["tiny"] });
      const res = await serviceClient(ts.url, ts.caPem, () => secret).invoke({ deploymentId: "tiny", payload: completion(4) });
      const body = JSON.parse(Buffer.from(res.payload).toString("utf8")) as { usage: { completion_tokens: number } };
      expect(body.usage.completion_tokens).toBeGreaterThan(0);

      // The one fallback line: the carried CUDA build was found and failed to load (no driver here),
      // not "no CUDA build in this install", which is what a CPU install says.
      const abort = new AbortController();
      const lines: string[] = [];
      const fallback = (async () => {
        try {
          for await (const batch of ts.admin.watchDeploymentLogs({ deploymentId: "tiny", tailLines: 100 }, { signal: abort.signal })) {
            lines.push(...batch.lines.map((l) => l.text));
            if (lines.some((l) => l.startsWith("modelforge: running on the CPU"))) return;
          }
        } catch (err) {
          if (ConnectError.from(err).code !== Code.Canceled) throw err;
        }
      })();
      const deadline = setTimeout(() => abort.abort(), 30_000);
      await fallback;
      clearTimeout(deadline);
      abort.abort();
      expect(lines.filter((l) => l.includes("running on the CPU"))).toEqual([
        "modelforge: running on the CPU: no NVIDIA driver (libcuda.so.1 is not found)",
      ]);
    }, 60_000);

    it("carries gpu-check, which says there is no GPU here and exits 0", () => {
      const run = spawnSync(process.execPath, [join(artefact, "gpu-check.mjs")], {
        env: { PATH: process.env.PATH ?? "", HOME: base },
        encoding: "utf8",
      });
      expect(run.status, run.stderr).toBe(0);
      expect(run.stdout).toBe("gpu-check: no NVIDIA GPU here (nvidia-smi is not installed or lists no GPU); nothing to check\n");
    });

    it("carries gpu-check, which on a node listing a GPU finds the CUDA build and says why it does not load", () => {
      const run = spawnSync(process.execPath, [join(artefact, "gpu-check.mjs")], {
        env: { PATH: `${fakeNvidiaSmi}:${process.env.PATH ?? ""}`, HOME: base, FAKE_NVIDIA_SMI_DIR: join(base, "gpu") },
        encoding: "utf8",
      });
      expect(run.status, run.stderr).toBe(0);
      expect(run.stdout).toContain("GPU 0: NVIDIA L4, 24576 MiB, driver 550.54.15\n");
      expect(run.stdout).toContain("gpu-check: CUDA is not usable here (no NVIDIA driver (libcuda.so.1 is not found))");
    });
  },
);
