// Bench-only: the agent of bench/invoke.ts and bench/openai.ts in its own process. The real session loop, job runner
// and deployments host, with a supervisor whose openai-http engine starts the trivial stub runtime
// (./stub-openai.ts) from an operator-style command template.
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { pino } from "pino";
import { runAgent } from "../../agent/session/run.js";
import { openJobRunner } from "../../agent/jobs/index.js";
import { capabilityRegistry } from "../../agent/capabilities/index.js";
import { Supervisor } from "../../agent/engines/supervisor.js";
import { deploymentHost, sessionDeployments } from "../../agent/deployments/index.js";

const statePath = process.env.BENCH_AGENT_STATE!;
const log = pino({ level: "warn" });
const stub = fileURLToPath(new URL("./stub-openai.ts", import.meta.url));
// The stub's own options (its stream's pace), as bench/support/stub-deployment.ts passes them.
const stubArgs = JSON.parse(process.env.BENCH_STUB_ARGS ?? "[]") as string[];
const supervisor = new Supervisor({
  registryPath: join(dirname(statePath), "runtimes.json"),
  openAiHttp: {
    command: [process.execPath, "--import", "tsx", stub, "--port", "{port}", "--model", "{model}", ...stubArgs],
    healthPath: "/health",
  },
});
const host = deploymentHost(supervisor, log);
const stop = new AbortController();
process.once("SIGTERM", () => stop.abort());
await runAgent({
  statePath,
  log,
  signal: stop.signal,
  jobs: await openJobRunner({
    statePath,
    log,
    signal: stop.signal,
    registry: await capabilityRegistry({
      statePath,
      log,
      env: { MODELFORGE_AGENT_ARTIFACT_SOURCES: "control-plane", MODELFORGE_AGENT_ARTIFACT_ROOTS: process.env.BENCH_AGENT_ROOT },
      supervisor,
      deployments: host,
    }),
  }),
  deployments: sessionDeployments(host, log),
});
await supervisor.stopAll();
process.exit(0);
