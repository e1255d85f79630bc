// The node agent's command line: enroll, run, status.
import { existsSync, readFileSync } from "node:fs";
import { parseArgs, parseEnv } from "node:util";
import { X509Certificate } from "node:crypto";
import { pino } from "pino";
import { enrollNode, EnrollError } from "./enroll.js";
import { readState, StateError } from "./state.js";
import { runAgent } from "./session/run.js";
import { openJobRunner } from "./jobs/index.js";
import { capabilityRegistry } from "./capabilities/index.js";
import { Supervisor } from "./engines/supervisor.js";
import { deploymentHost, sessionDeployments } from "./deployments/index.js";
import { dirname, join } from "node:path";
import { SourceConfigError } from "./capabilities/artifact-sources.js";
import { agentVersion } from "./version.js";
import { readTemplateFile, TemplateError } from "./engines/openai-http.js";
import { hasLlamaCudaBuild } from "./engines/gpus.js";
import { collectNvidiaGpus } from "./collectors/inventory.js";
import { parseDuration } from "../common/duration.js";
import { ConnectError } from "@connectrpc/connect";
import { codeName } from "../common/codes.js";
import { offsetClock, systemClock } from "../common/clock.js";
import { parseListenAddress } from "../common/listen-address.js";
import { serveMetrics } from "../common/metrics-endpoint.js";
import { AgentMetrics } from "./metrics.js";
import { openUpdater, updatePrepare } from "./update/index.js";
import { parseByteSize } from "../common/byte-size.js";
import { agentReporters, type Reporters } from "./session/reporters.js";
import { nodeConnection } from "./session/transport.js";

const usage = `Usage: agent <command> [options]

Commands:
  enroll   Join the control plane with a one-time token
           --server URL --token TOKEN --ca-fingerprint sha256:HEX [--name NAME] [--force]
  run      Keep a session open: heartbeats, inventory, telemetry, jobs
  status   Show this node's identity and certificate
  update-prepare  Before each start of the service: roll back an update that did not come up

Options:
  --state PATH   Agent state file (default $MODELFORGE_AGENT_STATE or ./data/agent/state.json)
  --config PATH  Environment file (KEY=value lines) read at start; variables already set win
                 (default $MODELFORGE_AGENT_CONFIG, else /etc/modelforge/agent.env when it exists)
  -h, --help     Show this help
  --version      Print the agent's version

Environment:
  MODELFORGE_AGENT_STATE          state file path
  MODELFORGE_AGENT_LOG_LEVEL      log level (default info)
  MODELFORGE_AGENT_RUNTIMES       "on" serves runtime.probe/health/unload.v1 and deployment.load/health/drain/unload.v1 (llama.cpp engine)
  MODELFORGE_AGENT_OPENAI_HTTP_TEMPLATE  a JSON file with the argv template of an external
                                  OpenAI-compatible server; with it the openai-http engine is offered
  MODELFORGE_AGENT_BACKOFF_BASE   first reconnect delay ceiling (default 500ms)
  MODELFORGE_AGENT_BACKOFF_MAX    largest reconnect delay (default 10s)
  MODELFORGE_AGENT_REPLY_TIMEOUT  reconnect when Welcome or a heartbeat answer takes longer (default 30s)
  MODELFORGE_AGENT_SESSION_FAST_PATH  "off" runs the Session through Connect's generic client
                                  instead of framing it by hand (default on)
  MODELFORGE_AGENT_CLOCK_OFFSET   shift the agent's observation clock, e.g. 1h or -1h (testing)
  MODELFORGE_AGENT_ARTIFACT_SOURCES  artifact.acquire.v1 sources in order, comma-separated:
                                  control-plane, https://mirror/base[;token-file=/path] (unset: not offered)
  MODELFORGE_AGENT_ARTIFACT_ROOTS target roots this agent writes artifacts under, created
                                  (mode 0750) at start when missing (default /var/lib/modelforge/artifacts)
  MODELFORGE_AGENT_STAGING_MAX_AGE  staging of an acquisition unchanged this long is removed (default 24h)
  MODELFORGE_AGENT_STAGING_SWEEP_INTERVAL  how often staging is swept after the start (default 1h)
  MODELFORGE_AGENT_METRICS_ADDRESS  Prometheus endpoint, PORT (on 127.0.0.1) or HOST:PORT (unset: none)
  MODELFORGE_AGENT_MODEL_MEMORY   the most memory model runtimes may hold together, e.g. 48GiB (unset: what is free)
  MODELFORGE_AGENT_RELEASE_KEY    Ed25519 public key (PEM file) self-updates must be signed with
  MODELFORGE_AGENT_UPDATE_DEADLINE  how long an updated agent has to reach a healthy session (default 2m)
`;

async function main(argv: string[]): Promise<number> {
  const { values, positionals } = parseArgs({
    args: argv,
    allowPositionals: true,
    options: {
      server: { type: "string" },
      token: { type: "string" },
      "ca-fingerprint": { type: "string" },
      name: { type: "string" },
      force: { type: "boolean" },
      state: { type: "string" },
      config: { type: "string" },
      help: { type: "boolean", short: "h" },
      version: { type: "boolean" },
    },
  });
  // Answered before anything else runs: an updating agent asks a downloaded release this.
  if (values.version) {
    process.stdout.write(`${agentVersion}\n`);
    return 0;
  }
  const command = positionals[0];
  if (values.help || command === undefined) {
    process.stdout.write(usage);
    return command === undefined && !values.help ? 2 : 0;
  }
  loadConfigFile(values.config ?? process.env.MODELFORGE_AGENT_CONFIG);
  const statePath = values.state ?? process.env.MODELFORGE_AGENT_STATE ?? "./data/agent/state.json";
  switch (command) {
    case "enroll":
      return enroll(values, statePath);
    case "run":
      return run(statePath, process.env);
    case "status":
      return status(statePath);
    case "update-prepare": {
      const said = await updatePrepare(statePath);
      if (said !== "") process.stderr.write(`agent: ${said}\n`);
      return 0;
    }
    default:
      process.stderr.write(`agent: unknown command "${command}"\n\n${usage}`);
      return 2;
  }
}

async function enroll(
  values: { server?: string; token?: string; "ca-fingerprint"?: string; name?: string; force?: boolean },
  statePath: string,
): Promise<number> {
  const missing = (["server", "token", "ca-fingerprint"] as const).filter((k) => !values[k]);
  if (missing.length > 0) {
    process.stderr.write(`agent enroll: missing --${missing.join(", --")}\n`);
    return 2;
  }
  const state = await enrollNode({
    serverUrl: values.server!,
    token: values.token!,
    caFingerprint: values["ca-fingerprint"]!,
    name: values.name,
    statePath,
    force: values.force,
    onBusy: (waitMs, reason) =>
      process.stderr.write(`agent enroll: the control plane is busy (${reason}); trying again in ${Math.ceil(waitMs / 1000)} s\n`),
  });
  process.stdout.write(`enrolled as node ${state.nodeId}; identity saved to ${statePath}\n`);
  return 0;
}

async function run(statePath: string, env: NodeJS.ProcessEnv): Promise<number> {
  const log = pino({ level: env.MODELFORGE_AGENT_LOG_LEVEL ?? "info", base: { service: "modelforge-agent" } });
  const stop = new AbortController();
  process.once("SIGTERM", () => stop.abort());
  process.once("SIGINT", () => stop.abort());
  const clock = env.MODELFORGE_AGENT_CLOCK_OFFSET
    ? offsetClock(systemClock, signedDuration(env.MODELFORGE_AGENT_CLOCK_OFFSET))
    : systemClock;
  const supervisor = await runtimeSupervisor(env, statePath);
  // Metrics are opt-in, on loopback unless another address is written out.
  const metrics = env.MODELFORGE_AGENT_METRICS_ADDRESS?.trim() ? new AgentMetrics() : undefined;
  const endpoint = metrics && (await serveMetrics(metrics.registry, metricsAddress(env.MODELFORGE_AGENT_METRICS_ADDRESS!)));
  if (endpoint) log.info({ url: endpoint.url }, "metrics serving");
  for (const orphan of (await supervisor?.reapOrphans()) ?? []) {
    log.warn({ runtimeId: orphan.record.id, pid: orphan.record.pid, outcome: orphan.outcome }, "orphaned runtime from an earlier agent");
  }
  const deployments = supervisor ? deploymentHost(supervisor, log) : undefined;
  let exitCode = 0;
  const exit = (code: number) => {
    exitCode = code;
    stop.abort();
  };
  const updates = await openUpdater({ statePath, env, log, signal: stop.signal, exit });
  await runAgent({
    statePath,
    log,
    signal: stop.signal,
    clock,
    backoffBaseMs: env.MODELFORGE_AGENT_BACKOFF_BASE ? parseDuration(env.MODELFORGE_AGENT_BACKOFF_BASE) : undefined,
    backoffMaxMs: env.MODELFORGE_AGENT_BACKOFF_MAX ? parseDuration(env.MODELFORGE_AGENT_BACKOFF_MAX) : undefined,
    replyTimeoutMs: env.MODELFORGE_AGENT_REPLY_TIMEOUT ? parseDuration(env.MODELFORGE_AGENT_REPLY_TIMEOUT) : undefined,
    connect: sessionFastPath(env.MODELFORGE_AGENT_SESSION_FAST_PATH) ? undefined : (state) => nodeConnection(state, { fastPath: false }),
    metrics,
    reporters: modelMemoryReporters(env.MODELFORGE_AGENT_MODEL_MEMORY),
    jobs: await openJobRunner({
      statePath,
      log,
      signal: stop.signal,
      // Staging ages are file mtimes: compared with the real clock, not a shifted one.
      registry: await capabilityRegistry({ statePath, log, env, supervisor, deployments, clock: systemClock, signal: stop.signal }),
      metrics,
      // Lease expiries are the server's times: compared with the real clock, not a shifted one.
      clock: systemClock,
    }),
    deployments: deployments ? sessionDeployments(deployments, log) : undefined,
    updates,
  });
  await supervisor?.stopAll();
  await endpoint?.close();
  return exitCode;
}

/**
 * The runtime supervisor when runtimes are on (they are opt-in): its registry beside the state file
 * lets a restarted agent stop what an earlier one left running.
 */
async function runtimeSupervisor(env: NodeJS.ProcessEnv, statePath: string): Promise<Supervisor | undefined> {
  const templatePath = env.MODELFORGE_AGENT_OPENAI_HTTP_TEMPLATE?.trim() || undefined;
  if (templatePath !== undefined && env.MODELFORGE_AGENT_RUNTIMES !== "on") {
    throw new TemplateError("MODELFORGE_AGENT_OPENAI_HTTP_TEMPLATE is set but MODELFORGE_AGENT_RUNTIMES is not on");
  }
  if (env.MODELFORGE_AGENT_RUNTIMES !== "on") return undefined;
  const openAiHttp =
    templatePath === undefined
      ? undefined
      : await readTemplateFile(templatePath).catch((err: unknown) => {
          throw err instanceof TemplateError ? new TemplateError(`MODELFORGE_AGENT_OPENAI_HTTP_TEMPLATE: ${err.message}`) : err;
        });
  // llama.cpp offers CUDA when this build carries its binaries and the node has NVIDIA GPUs.
  const llamaCuda = (await hasLlamaCudaBuild()) && (await collectNvidiaGpus()).gpus.length > 0;
  return new Supervisor({ registryPath: join(dirname(statePath), "runtimes.json"), openAiHttp, llamaCuda });
}

async function status(statePath: string): Promise<number> {
  const state = await readState(statePath);
  if (state === undefined) {
    process.stdout.write(`not enrolled (no state at ${statePath})\n`);
    return 1;
  }
  const cert = new X509Certificate(state.certPem);
  process.stdout.write(
    [
      `node id:        ${state.nodeId}`,
      `server:         ${state.serverUrl}`,
      `CA:             ${state.caFingerprint}`,
      `certificate:    serial ${cert.serialNumber}, valid until ${new Date(cert.validTo).toISOString()}`,
      `sequences:      inventory ${state.sequences.inventory}, telemetry ${state.sequences.telemetry}`,
      `agent version:  ${agentVersion}`,
      "",
    ].join("\n"),
  );
  return 0;
}

/** MODELFORGE_AGENT_SESSION_FAST_PATH: "on" (the default) or "off". */
function sessionFastPath(text: string | undefined): boolean {
  const value = (text ?? "").trim() || "on";
  if (value !== "on" && value !== "off") throw new Error(`MODELFORGE_AGENT_SESSION_FAST_PATH: expected on or off, got "${value}"`);
  return value === "on";
}

function metricsAddress(text: string) {
  try {
    return parseListenAddress(text);
  } catch (err) {
    throw new Error(`MODELFORGE_AGENT_METRICS_ADDRESS: ${(err as Error).message}`);
  }
}

/** The installed agent's configuration, as systemd's EnvironmentFile= reads it for the service. */
const SYSTEM_CONFIG = "/etc/modelforge/agent.env";

/** Fills unset variables from the configuration file; a file named explicitly must exist. */
function loadConfigFile(explicit: string | undefined): void {
  const path = explicit ?? (existsSync(SYSTEM_CONFIG) ? SYSTEM_CONFIG : undefined);
  if (path === undefined) return;
  let text: string;
  try {
    text = readFileSync(path, "utf8");
  } catch (err) {
    throw new ConfigFileError(`cannot read configuration ${path}: ${(err as NodeJS.ErrnoException).code ?? (err as Error).message}`);
  }
  for (const [key, value] of Object.entries(parseEnv(text))) {
    if (process.env[key] === undefined) process.env[key] = value;
  }
}

class ConfigFileError extends Error {}

function signedDuration(text: string): number {
  return text.startsWith("-") ? -parseDuration(text.slice(1)) : parseDuration(text.replace(/^\+/, ""));
}

main(process.argv.slice(2)).then(
  (code) => process.exit(code),
  (err: unknown) => {
    const message =
      err instanceof ConnectError
        ? `${codeName(err.code)}: ${err.rawMessage}`
        : err instanceof EnrollError || err instanceof StateError || err instanceof SourceConfigError || err instanceof ConfigFileError
          ? err.message
          : (err as Error).message;
    process.stderr.write(`agent: ${message}\n`);
    process.exit(1);
  },
);

/** The collectors, with the operator's bound on model memory in each telemetry sample when one is set. */
function modelMemoryReporters(text: string | undefined): Reporters | undefined {
  if (text === undefined || text.trim() === "") return undefined;
  let bytes: number;
  try {
    bytes = parseByteSize(text.trim());
  } catch (err) {
    throw new Error(`MODELFORGE_AGENT_MODEL_MEMORY: ${(err as Error).message}`);
  }
  const modelMemoryBytes = BigInt(bytes);
  return { ...agentReporters, telemetry: async () => ({ ...(await agentReporters.telemetry()), modelMemoryBytes }) };
}
