// The control plane's version (from package.json) and the agent protocol versions it accepts.
import { readFileSync } from "node:fs";
import { defaultOldestAgentVersion } from "./agent-version.js";

export const serverVersion: string = (JSON.parse(readFileSync(new URL("../package.json", import.meta.url), "utf8")) as { version: string })
  .version;

export const supportedProtocolVersions: readonly number[] = [1];

/** The oldest agent accepted unless MODELFORGE_MIN_AGENT_VERSION says otherwise: two minor versions behind. */
export const defaultMinAgentVersion: string = defaultOldestAgentVersion(serverVersion);
