// An in-process agent for tests: the real `runAgent` session loop and the real JobRunner, against a
// real TLS server, with test-only capability handlers. A JobTap between the session and the runner
// can hold (pause) or drop job traffic, to play a frozen agent or a lossy network, and records the
// leases and cancels that arrive.
import { mkdtempSync, readFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Writable } from "node:stream";
import { pino } from "pino";
import { Code, ConnectError, createClient, type Client, type Interceptor } from "@connectrpc/connect";
import { grpcTransport } from "../../common/http2-sessions.js";
import type { JobCancel } from "../../gen/proto/modelforge/agent/v1/agent_pb.js";
import { AdminService } from "../../gen/proto/modelforge/admin/v1/admin_pb.js";
import type { JobLease } from "../../gen/proto/modelforge/jobs/v1/jobs_pb.js";
import { enrollNode } from "../../agent/enroll.js";
import { runAgent, type SessionJobs, type SessionLink } from "../../agent/session/run.js";
import type { Reporters } from "../../agent/session/reporters.js";
import type { SessionDeployments } from "../../agent/deployments/session-hook.js";
import { CapabilityRegistry, openJobRunner, type JobRunner } from "../../agent/jobs/index.js";
import { nodeFromState, type TestNode } from "./node.js";

export type LinkMessage = Parameters<SessionLink["send"]>[0];

/** Sits between the session and the runner. */
export class JobTap implements SessionJobs {
  /** Every lease that reached the agent, with the local time it arrived. */
  readonly leases: { lease: JobLease; at: number }[] = [];
  readonly cancels: JobCancel[] = [];
  /** Outbound job messages for which this returns true fail as if the network lost them. */
  drop: ((m: LinkMessage) => boolean) | undefined;
  /** When set, pushed cancels are not passed on (the agent must learn from a progress reply). */
  dropCancels = false;
  /** Called for each lease as it arrives (before the runner sees it). */
  onLeaseSeen: ((lease: JobLease, at: number) => void) | undefined;
  private paused = false;
  private held: (() => void)[] = [];

  constructor(readonly inner: SessionJobs) {}

  capabilities(): string[] {
    return this.inner.capabilities();
  }

  engines(): string[] {
    return this.inner.engines?.() ?? [];
  }
  runningJobIds(): string[] {
    return this.inner.runningJobIds();
  }
  onLease(lease: JobLease, link: SessionLink): void {
    const at = performance.now();
    this.leases.push({ lease, at });
    this.onLeaseSeen?.(lease, at);
    this.deliver(() => this.inner.onLease(lease, this.wrap(link)));
  }
  onCancel(cancel: JobCancel): void {
    this.cancels.push(cancel);
    if (this.dropCancels) return;
    this.deliver(() => this.inner.onCancel(cancel));
  }

  /** Freezes job traffic both ways, as a stopped process would (heartbeats go on). */
  pause(): void {
    this.paused = true;
  }
  /** Lets held traffic through, in the order it was held. */
  resume(): void {
    this.paused = false;
    const held = this.held;
    this.held = [];
    for (const release of held) release();
  }

  private deliver(action: () => void): void {
    if (this.paused) this.held.push(action);
    else action();
  }
  private wrap(link: SessionLink): SessionLink {
    return {
      send: (m) => {
        if (this.drop?.(m)) return Promise.reject(new ConnectError("lost by the test network", Code.Unavailable));
        if (!this.paused) return link.send(m);
        return new Promise((resolve, reject) => this.held.push(() => link.send(m).then(resolve, reject)));
      },
    };
  }
}

export interface InProcessAgent {
  node: TestNode;
  runner: JobRunner;
  tap: JobTap;
  logs(): string;
  /** Ends the session only; jobs keep running (a network partition). */
  disconnect(): Promise<void>;
  /** Ends the session and stops every job (the agent process exits). */
  stop(): Promise<void>;
}

export interface AgentOptions {
  registry?: CapabilityRegistry;
  /** Reuse a runner (and its running jobs) from an earlier, disconnected agent. */
  runner?: JobRunner;
  receiptsPath?: string;
  /** Session reconnect backoff (default 50 ms doubling to 300 ms, so tests reconnect fast). */
  backoff?: { baseMs: number; maxMs: number };
  /** What the agent reports as inventory and telemetry (default: this machine's, as `agent run`). */
  reporters?: Reporters;
  /** The Session side of deployments (held runtimes, replica loads, relayed invokes); none by default. */
  deployments?: SessionDeployments;
}

/** Runs the agent of an enrolled node in this process. */
export async function startAgent(node: TestNode, opts: AgentOptions = {}): Promise<InProcessAgent> {
  const lines: string[] = [];
  const log = pino(
    { level: "debug", base: { service: "test-agent" } },
    new Writable({
      write(chunk: Buffer, _enc, cb) {
        lines.push(chunk.toString("utf8"));
        cb();
      },
    }),
  );
  const jobsStop = new AbortController();
  const sessionStop = new AbortController();
  const runner =
    opts.runner ??
    (await openJobRunner({
      statePath: node.statePath,
      log,
      signal: jobsStop.signal,
      registry: opts.registry ?? new CapabilityRegistry(),
      retryDelayMs: 100,
      ...(opts.receiptsPath !== undefined ? { receiptsPath: opts.receiptsPath } : {}),
    }));
  const tap = new JobTap(runner);
  const running = runAgent({
    statePath: node.statePath,
    log,
    signal: sessionStop.signal,
    jobs: tap,
    backoffBaseMs: opts.backoff?.baseMs ?? 50,
    backoffMaxMs: opts.backoff?.maxMs ?? 300,
    ...(opts.reporters !== undefined ? { reporters: opts.reporters } : {}),
    ...(opts.deployments !== undefined ? { deployments: opts.deployments } : {}),
  });
  running.catch(() => undefined);
  const disconnect = async () => {
    sessionStop.abort();
    await running.catch(() => undefined);
  };
  return {
    node,
    runner,
    tap,
    logs: () => lines.join(""),
    disconnect,
    async stop() {
      jobsStop.abort();
      runner.stopAll();
      await disconnect();
    },
  };
}

/** Enrolls a node with any server reachable at `url` (e.g. a child process), given its admin client. */
export async function enrollAt(url: string, admin: Client<typeof AdminService>, name = "node"): Promise<TestNode> {
  const token = await admin.createEnrollmentToken({ nodeName: name });
  const fingerprint = /--ca-fingerprint (\S+)/.exec(token.joinCommand)?.[1];
  if (fingerprint === undefined) throw new Error("join command names no CA fingerprint");
  const statePath = join(mkdtempSync(join(tmpdir(), "mf-agent-")), "state.json");
  const state = await enrollNode({ serverUrl: url, token: token.token, caFingerprint: fingerprint, statePath });
  return nodeFromState(statePath, state.nodeId);
}

/** An admin client for a server whose CA certificate is at `caPath` (e.g. <certs>/ca.crt). */
export function adminClientAt(url: string, caPath: string, key: string): Client<typeof AdminService> {
  const auth: Interceptor = (next) => (req) => {
    req.header.set("x-modelforge-admin-token", key);
    return next(req);
  };
  return createClient(
    AdminService,
    grpcTransport({ baseUrl: url, nodeOptions: { ca: readFileSync(caPath, "utf8") }, interceptors: [auth] }),
  );
}
