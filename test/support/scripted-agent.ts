// An in-process agent whose deployment steps all succeed at once (acquire answers the path the
// server expects, load a runtime id), reporting `availableBytes` of RAM free and 400 GiB of disk:
// for tests of placement and the controller, where a real runtime adds nothing but time.
import { join } from "node:path";
import { create } from "@bufbuild/protobuf";
import { TelemetrySchema } from "../../gen/proto/modelforge/common/v1/common_pb.js";
import type { JobSpec } from "../../gen/proto/modelforge/jobs/v1/jobs_pb.js";
import { CapabilityRegistry } from "../../agent/jobs/index.js";
import { collectInventory } from "../../agent/collectors/inventory.js";

const GiB = 2 ** 30;

export function scriptedDeploymentAgent(availableBytes: number, engines = ["llama.cpp", "openai-http"]) {
  const registry = new CapabilityRegistry();
  registry.engines = engines;
  registry
    .register("artifact.acquire.v1", async (spec: JobSpec) => {
      if (spec.kind.case !== "artifactAcquire") throw new Error("wrong spec");
      const v = spec.kind.value;
      const path = join(v.targetRoot, v.repository, v.commit);
      return { result: { case: "artifactAcquire", value: { path, files: v.files, bytesWritten: 0n } } };
    })
    .register("deployment.load.v1", async (spec: JobSpec) => {
      if (spec.kind.case !== "deploymentLoad") throw new Error("wrong spec");
      return { result: { case: "deploymentLoad", value: { runtimeId: "rt", revision: spec.kind.value.revision } } };
    })
    .register("deployment.drain.v1", async () => ({ result: { case: "deploymentDrain", value: { completedInFlight: 0 } } }))
    .register("deployment.unload.v1", async () => ({ result: { case: "deploymentUnload", value: { freedBytes: 0n } } }));
  const total = 32 * GiB;
  const telemetry = create(TelemetrySchema, {
    memoryTotalBytes: BigInt(total),
    memoryUsedBytes: BigInt(total - availableBytes),
    mounts: [{ mount: "/", sizeBytes: BigInt(500 * GiB), usedBytes: BigInt(100 * GiB) }],
  });
  return { registry, reporters: { inventory: () => collectInventory(), telemetry: async () => telemetry } };
}
