// The agent's capability handlers, built from its configuration. A capability is registered (and
// so advertised) only when the agent is configured to serve it.
import type { Logger } from "pino";
import { CapabilityRegistry } from "../jobs/registry.js";
import { readState, StateError } from "../state.js";
import { nodeClient } from "../session/transport.js";
import { artifactAcquireHandler } from "./artifact-acquire.js";
import { runtimeHealthHandler, runtimeProbeHandler, runtimeUnloadHandler } from "./runtime.js";
import type { Supervisor } from "../engines/supervisor.js";
import { registerDeploymentCapabilities, type DeploymentHost } from "../deployments/index.js";
import { parseDuration } from "../../common/duration.js";
import type { Clock } from "../../common/clock.js";
import { runStagingSweeper } from "./staging-sweeper.js";
import { prepareArtifactRoots } from "./artifact-roots.js";
import { ControlPlaneSource, MirrorSource, parseSourceList, SourceConfigError, type ArtifactSource } from "./artifact-sources.js";

export const DEFAULT_ARTIFACT_ROOTS = "/var/lib/modelforge/artifacts";

export interface CapabilityConfig {
  statePath: string;
  log: Logger;
  env: Record<string, string | undefined>;
  /** The runtime supervisor; with it the agent serves the runtime.* capabilities. */
  supervisor?: Supervisor;
  /** The deployments host; with it the agent serves the deployment.* capabilities. */
  deployments?: DeploymentHost;
  /** With both, the sweeper of abandoned artifact staging runs until the signal aborts. */
  clock?: Clock;
  signal?: AbortSignal;
}

const DEFAULT_STAGING_MAX_AGE = "24h";
const DEFAULT_STAGING_SWEEP_INTERVAL = "1h";

/** A duration setting, named in the error when it is malformed. */
function durationSetting(env: CapabilityConfig["env"], name: string, fallback: string): number {
  try {
    return parseDuration(env[name] ?? fallback);
  } catch (err) {
    throw new SourceConfigError(`${name}: ${(err as Error).message}`);
  }
}

/** The sources named by MODELFORGE_AGENT_ARTIFACT_SOURCES, in order. */
export function artifactSourcesFrom(text: string, statePath: string, mirrorFastPath = true): ArtifactSource[] {
  return parseSourceList(text).map((config) =>
    config.kind === "mirror"
      ? new MirrorSource({ ...config, plainHttp: mirrorFastPath })
      : new ControlPlaneSource(async () => {
          const state = await readState(statePath);
          if (state === undefined) throw new StateError(`no agent state at ${statePath}`);
          return nodeClient(state);
        }),
  );
}

/** MODELFORGE_AGENT_MIRROR_FAST_PATH: "on" (the default) or "off". */
function mirrorFastPath(text: string | undefined): boolean {
  const value = (text ?? "").trim() || "on";
  if (value !== "on" && value !== "off")
    throw new SourceConfigError(`MODELFORGE_AGENT_MIRROR_FAST_PATH: expected on or off, got "${value}"`);
  return value === "on";
}

/** Roots from MODELFORGE_AGENT_ARTIFACT_ROOTS: absolute, comma-separated. */
export function artifactRootsFrom(text: string): string[] {
  const roots = text
    .split(",")
    .map((r) => r.trim())
    .filter((r) => r !== "");
  for (const root of roots) {
    if (!root.startsWith("/") || root.split("/").some((s) => s === "." || s === "..") || (root.length > 1 && root.endsWith("/"))) {
      throw new SourceConfigError(`MODELFORGE_AGENT_ARTIFACT_ROOTS: "${root}" is not a canonical absolute path`);
    }
  }
  return roots;
}

/**
 * The registry of what this agent is configured to serve. With artifact sources, the artifact
 * roots are created first (./artifact-roots.ts): a root that cannot be made refuses the start.
 */
export async function capabilityRegistry(config: CapabilityConfig): Promise<CapabilityRegistry> {
  const registry = new CapabilityRegistry();
  const sourcesText = config.env.MODELFORGE_AGENT_ARTIFACT_SOURCES?.trim() ?? "";
  if (sourcesText !== "") {
    let sources: ArtifactSource[];
    let roots: string[];
    try {
      sources = artifactSourcesFrom(sourcesText, config.statePath, mirrorFastPath(config.env.MODELFORGE_AGENT_MIRROR_FAST_PATH));
      roots = artifactRootsFrom(config.env.MODELFORGE_AGENT_ARTIFACT_ROOTS ?? DEFAULT_ARTIFACT_ROOTS);
    } catch (err) {
      if (err instanceof SourceConfigError) throw new SourceConfigError(`MODELFORGE_AGENT_ARTIFACT_SOURCES: ${err.message}`);
      throw err;
    }
    const maxAgeMs = durationSetting(config.env, "MODELFORGE_AGENT_STAGING_MAX_AGE", DEFAULT_STAGING_MAX_AGE);
    const intervalMs = durationSetting(config.env, "MODELFORGE_AGENT_STAGING_SWEEP_INTERVAL", DEFAULT_STAGING_SWEEP_INTERVAL);
    for (const root of await prepareArtifactRoots(roots)) config.log.info({ root }, "artifact root created");
    const active = new Set<string>();
    registry.register("artifact.acquire.v1", artifactAcquireHandler({ sources, roots, log: config.log, active }));
    if (config.clock && config.signal) {
      void runStagingSweeper({ roots, maxAgeMs, intervalMs, active, clock: config.clock, log: config.log, signal: config.signal });
    }
  }
  if (config.supervisor) {
    const opts = { supervisor: config.supervisor, log: config.log };
    registry.register("runtime.probe.v1", runtimeProbeHandler(opts));
    registry.register("runtime.health.v1", runtimeHealthHandler(opts));
    registry.register("runtime.unload.v1", runtimeUnloadHandler(opts));
    registry.engines = config.supervisor.advertisedEngines();
    registry.embeddingEngines = config.supervisor.embeddingEngines();
  }
  if (config.deployments) registerDeploymentCapabilities(registry, config.deployments);
  return registry;
}
