// What the agent's session loop is built from: the state file, the job and deployment hooks, the
// clock, and the timings, transport and observers that tests and benchmarks replace.
import type { Logger } from "pino";
import type { JobCancel } from "../../gen/proto/modelforge/agent/v1/agent_pb.js";
import type { AgentUpdateInstruction, AgentUpdateReport } from "../../gen/proto/modelforge/agent/v1/agent_update_pb.js";
import type { JobLease } from "../../gen/proto/modelforge/jobs/v1/jobs_pb.js";
import type { ConnectError } from "@connectrpc/connect";
import type { Clock } from "../../common/clock.js";
import type { SessionDeployments } from "../deployments/session-hook.js";
import type { SessionLoopMetrics } from "../metrics.js";
import type { AgentState } from "../state.js";
import type { NodeConnection } from "./transport.js";
import type { SessionLink } from "./link.js";
import type { Reporters } from "./reporters.js";

/** How job handling plugs into the session (see ../jobs). */
export interface SessionJobs {
  capabilities(): string[];
  /** The runtime engines the agent runs, when it runs any. */
  engines?(): string[];
  /** The engines among them whose runtimes serve embeddings. */
  embeddingEngines?(): string[];
  runningJobIds(): string[];
  onLease(lease: JobLease, link: SessionLink): void;
  onCancel(cancel: JobCancel): void;
}

/** How self-update plugs into the session (see ../update). */
export interface SessionUpdates {
  /** The outcome of the last update, for Hello. */
  lastUpdate(): Promise<AgentUpdateReport | undefined>;
  /** Welcome arrived: the report was heard, a new agent is proven. */
  welcomed(): Promise<void>;
  /** An agent.update instruction; `refused` ends the session so the next Hello reports the refusal. */
  follow(instruction: AgentUpdateInstruction, refused: () => void): void;
}

/** Hears how sessions go (the fleet benchmark counts with it); every hook is optional. */
export interface SessionObserver {
  /** Welcome arrived: the session is open. */
  established?(): void;
  /** A session ended: `error` undefined for a clean end; `opened` whether Welcome had arrived. */
  ended?(error: ConnectError | undefined, opened: boolean): void;
  /** A heartbeat's answer arrived after `latencyMs` (refused: a ReplyError). */
  heartbeat?(latencyMs: number, refused: boolean): void;
}

export interface RunOptions {
  statePath: string;
  log: Logger;
  signal: AbortSignal;
  jobs?: SessionJobs;
  deployments?: SessionDeployments;
  updates?: SessionUpdates;
  /**
   * The agent's time for observed_at, renewal and inventory cadence (default: the system clock;
   * skew drills and tests pass another). Timers that pace the session stay on real time.
   */
  clock?: Clock;
  backoffBaseMs?: number;
  backoffMaxMs?: number;
  /**
   * How long to wait for Welcome, and for the answer to each heartbeat, before giving up on the
   * session and reconnecting (default 30 s). Heartbeats need no I/O on the server, so a missing
   * answer means a hung server or a stream that is dead in a way HTTP/2 pings cannot see.
   */
  replyTimeoutMs?: number;
  metrics?: SessionLoopMetrics | undefined;
  /** Opens the connection for one session (default: ../transport.ts, what `agent run` uses). */
  connect?: (state: AgentState) => NodeConnection;
  /** Inventory and telemetry sources; null sends heartbeats only (the fleet benchmark). */
  reporters?: Reporters | null;
  observer?: SessionObserver;
}
