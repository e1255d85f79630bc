// A node for tests: enrolled through the agent's real enrollment code, with its state in a temp
// directory, plus a client that presents its certificate.
import { mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { enrollNode } from "../../agent/enroll.js";
import { readState, type AgentState } from "../../agent/state.js";
import { nodeClient, type AgentClient } from "../../agent/session/transport.js";
import type { TestServer } from "./server.js";
import { waitFor } from "./wait.js";

export interface TestNode {
  nodeId: string;
  statePath: string;
  state(): Promise<AgentState>;
  /** An AgentService client presenting the node's current certificate. */
  client(): Promise<AgentClient>;
}

export async function enrollTestNode(ts: TestServer, name = "node"): Promise<TestNode> {
  const token = await ts.admin.createEnrollmentToken({ nodeName: name });
  const statePath = join(mkdtempSync(join(tmpdir(), "mf-agent-")), "state.json");
  const state = await enrollNode({
    serverUrl: ts.url,
    token: token.token,
    caFingerprint: ts.server.ca.fingerprint,
    statePath,
  });
  return nodeFromState(statePath, state.nodeId);
}

export function nodeFromState(statePath: string, nodeId: string): TestNode {
  const state = async () => {
    const s = await readState(statePath);
    if (s === undefined) throw new Error(`no state at ${statePath}`);
    return s;
  };
  return { nodeId, statePath, state, client: async () => nodeClient(await state()) };
}

/** Polls until `check` returns a truthy value or the timeout passes (waitFor with positional options). */
export function eventually<T>(
  check: () => Promise<T | undefined | false> | T | undefined | false,
  timeoutMs = 10_000,
  what = "condition",
): Promise<T> {
  return waitFor(check, { timeout: timeoutMs, what, interval: 50 });
}
