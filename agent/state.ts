// The agent's persisted state: its identity (node id, key, certificate, CA) and its stream
// sequence numbers. Stable identity comes from this file, never from the host name. Written
// atomically with mode 0600: it holds the private key.
import { readFile } from "node:fs/promises";
import { dirname } from "node:path";
import { ensurePrivateDir, writeFileAtomic } from "../common/files.js";

export interface AgentState {
  version: 1;
  serverUrl: string;
  nodeId: string;
  keyPem: string;
  certPem: string;
  caPem: string;
  caFingerprint: string;
  /** Last sequence used per stream; never goes backwards, survives restarts. */
  sequences: { inventory: string; telemetry: string };
}

export class StateError extends Error {
  override name = "StateError";
}

export async function readState(path: string): Promise<AgentState | undefined> {
  let text: string;
  try {
    text = await readFile(path, "utf8");
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === "ENOENT") return undefined;
    throw new StateError(`cannot read agent state ${path}: ${(err as Error).message}`);
  }
  let parsed: unknown;
  try {
    parsed = JSON.parse(text);
  } catch {
    throw new StateError(`agent state ${path} is damaged (not JSON)`);
  }
  const s = parsed as Partial<AgentState>;
  if (s.version !== 1 || !s.nodeId || !s.keyPem || !s.certPem || !s.caPem || !s.serverUrl || !s.sequences) {
    throw new StateError(`agent state ${path} is damaged (fields missing)`);
  }
  return s as AgentState;
}

export async function writeState(path: string, state: AgentState): Promise<void> {
  await ensurePrivateDir(dirname(path));
  await writeFileAtomic(path, `${JSON.stringify(state, null, 2)}\n`, 0o600);
}

/**
 * Hands out sequence numbers for one stream, persisting each before it is used, so a crash can
 * skip a number but never reuse one.
 */
export class StateStore {
  private writes: Promise<void> = Promise.resolve();
  constructor(
    private readonly path: string,
    private state: AgentState,
  ) {}
  get current(): AgentState {
    return this.state;
  }
  async nextSequence(stream: keyof AgentState["sequences"]): Promise<bigint> {
    const n = BigInt(this.state.sequences[stream]) + 1n;
    await this.update({ sequences: { ...this.state.sequences, [stream]: n.toString() } });
    return n;
  }
  /** Writes are serialized and each writes the newest state, so an older write never lands last. */
  update(change: Partial<AgentState>): Promise<void> {
    this.state = { ...this.state, ...change };
    const write = this.writes.then(() => writeState(this.path, this.state));
    this.writes = write.catch(() => undefined);
    return write;
  }
}
