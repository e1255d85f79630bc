// Self-update as `agent run` and `agent update-prepare` use it (docs/upgrades.md).
import { realpathSync } from "node:fs";
import { dirname } from "node:path";
import type { Logger } from "pino";
import { loadReleaseKey } from "../../common/release-key.js";
import { parseDuration } from "../../common/duration.js";
import { readState } from "../state.js";
import { nodeClient } from "../session/transport.js";
import { updateLayout } from "./layout.js";
import { prepareStart } from "./prepare.js";
import { Updater } from "./updater.js";

/** The directory of the running agent: what `current` points at before any update. */
export function selfDir(): string {
  return dirname(realpathSync(process.argv[1] ?? "."));
}

export async function openUpdater(deps: {
  statePath: string;
  env: NodeJS.ProcessEnv;
  log: Logger;
  signal: AbortSignal;
  exit(code: number): void;
}): Promise<Updater> {
  const { env } = deps;
  const keyFile = env.MODELFORGE_AGENT_RELEASE_KEY?.trim();
  const key = keyFile ? await loadReleaseKey(keyFile) : undefined;
  const deadlineText = env.MODELFORGE_AGENT_UPDATE_DEADLINE?.trim() || "2m";
  const updater = new Updater({
    layout: updateLayout(deps.statePath),
    // Read each time: the certificate may have been renewed since the agent started.
    client: async () => {
      const state = await readState(deps.statePath);
      if (state === undefined) throw new Error(`no agent state at ${deps.statePath}`);
      return nodeClient(state);
    },
    key,
    log: deps.log,
    now: () => Date.now(),
    selfDir: selfDir(),
    deadlineMs: parseDuration(deadlineText),
    exit: deps.exit,
    signal: deps.signal,
  });
  await updater.started();
  return updater;
}

/** `agent update-prepare`: what the service runs before each start. */
export async function updatePrepare(statePath: string): Promise<string> {
  const decision = await prepareStart(updateLayout(statePath), selfDir(), Date.now());
  return decision.kind === "roll back"
    ? decision.reason
    : decision.kind === "try"
      ? `trying the new agent (start ${decision.attempts})`
      : "";
}
