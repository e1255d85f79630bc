// The agent's version (from package.json) and the protocol version it speaks.
import { readFileSync } from "node:fs";

export const agentVersion: string = (JSON.parse(readFileSync(new URL("../package.json", import.meta.url), "utf8")) as { version: string })
  .version;

export const protocolVersion = 1;
