// deployment.load/health/drain/unload.v1 on the agent, and the Session side of deployments (held
// deployments in Hello, relayed invokes, log watches). Served when the agent runs runtimes.
import { durationMs } from "@bufbuild/protobuf/wkt";
import type { Logger } from "pino";
import { JobFailureCode } from "../../gen/proto/modelforge/jobs/v1/jobs_pb.js";
import type { Supervisor } from "../engines/supervisor.js";
import { JobFailureError, type CapabilityRegistry } from "../jobs/registry.js";
import type { SessionDeployments } from "./session-hook.js";
import { DeploymentHost } from "./host.js";
import { DeploymentRelay } from "./relay.js";
import { collectNvidiaGpus } from "../collectors/inventory.js";

export { DeploymentHost } from "./host.js";

/** How long a drain waits for in-flight requests when the job names no timeout. */
const defaultDrainMs = 30_000;

const invalid = (what: string) => new JobFailureError(JobFailureCode.INVALID_SPEC, `not a ${what}`, false);

/** Registers the four deployment capabilities on `registry`. */
export function registerDeploymentCapabilities(registry: CapabilityRegistry, host: DeploymentHost): void {
  registry.register("deployment.load.v1", async (spec, ctx) => {
    if (spec.kind.case !== "deploymentLoad") throw invalid("deployment load");
    await ctx.progress({ message: "loading" });
    const held = await host.load(spec.kind.value);
    return { result: { case: "deploymentLoad", value: { runtimeId: held.runtime.id, revision: held.revision } } };
  });
  registry.register("deployment.health.v1", async (spec) => {
    if (spec.kind.case !== "deploymentHealth") throw invalid("deployment health check");
    return { result: { case: "deploymentHealth", value: await host.health(spec.kind.value) } };
  });
  registry.register("deployment.drain.v1", async (spec, ctx) => {
    if (spec.kind.case !== "deploymentDrain") throw invalid("deployment drain");
    const { timeout } = spec.kind.value;
    const timeoutMs = timeout === undefined ? defaultDrainMs : durationMs(timeout);
    const completedInFlight = await host.drain(spec.kind.value, timeoutMs, ctx.signal);
    return { result: { case: "deploymentDrain", value: { completedInFlight } } };
  });
  registry.register("deployment.unload.v1", async (spec) => {
    if (spec.kind.case !== "deploymentUnload") throw invalid("deployment unload");
    return { result: { case: "deploymentUnload", value: { freedBytes: await host.unload(spec.kind.value) } } };
  });
}

/** The Session side: what Hello reports, and the relay's pushes. */
export function sessionDeployments(host: DeploymentHost, log: Logger): SessionDeployments {
  const relay = new DeploymentRelay(host, log);
  return {
    held: () => host.heldDeployments(),
    loads: () => host.replicaLoads(),
    onLost: (listener) => host.onLost(listener),
    onMessage: (message, link) => relay.onMessage(message, link),
  };
}

export function deploymentHost(supervisor: Supervisor, log: Logger): DeploymentHost {
  // A lease's GPUs are checked against what nvidia-smi lists now, not a cached inventory.
  const gpus = async () => (await collectNvidiaGpus()).gpus.map((g) => ({ uuid: g.uuid, index: g.index }));
  return new DeploymentHost({ supervisor, log, gpus });
}
