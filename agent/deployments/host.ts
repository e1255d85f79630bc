// The deployments this agent serves: one runtime per deployment revision and replica slot (two
// revisions during a revision change; several slots when max_per_node lets replicas share the
// node), started through the supervisor with the lease's resolved profile, held until unloaded.
// Drain marks a revision as taking no new invokes and waits for the ones in flight; unload stops
// the runtime. What is held is reported in Hello; after an agent restart nothing is (the new
// agent reaps the old runtimes as orphans), so the control plane loads again.
import type { Logger } from "pino";
import { systemClock, type Clock } from "../../common/clock.js";
import { onAbort } from "../../common/abort.js";
import type { Cancel } from "../../common/cancel.js";
import { EngineKind as ProtoEngineKind, JobFailureCode, type DeploymentLoad } from "../../gen/proto/modelforge/jobs/v1/jobs_pb.js";
import type { MessageInitShape } from "@bufbuild/protobuf";
import type { HeldDeploymentSchema, ReplicaLoadSchema } from "../../gen/proto/modelforge/agent/v1/agent_pb.js";
import type { RuntimeLogLine } from "../../gen/proto/modelforge/deployment/v1/deployment_pb.js";
import { EngineError, type Runtime, type Supervisor } from "../engines/supervisor.js";
import { unavailableGpus, type AssignedDevice } from "../engines/gpus.js";
import { failureFor } from "../capabilities/runtime.js";
import { verifiedModelPath } from "../capabilities/leased-model.js";
import { JobFailureError } from "../jobs/registry.js";
import { defaultLogLimits, LogTail, type LogLimits } from "./logs.js";
import { engineNameOfKind } from "../../common/engines.js";

export interface HeldRuntime {
  readonly deploymentId: string;
  readonly revision: bigint;
  /** The replica slot it serves: 0 for a lease from a server that names none. */
  readonly replica: number;
  readonly runtime: Runtime;
  /** The GPUs its lease assigned (UUIDs, sorted, comma-joined; "" for none): the runtime is bound to them. */
  readonly gpus: string;
  draining: boolean;
  /** Aborts of the invokes running on it. */
  readonly inFlight: Set<Cancel>;
  readonly logs: LogTail;
  /** Requests the runtime serves at once; the rest wait their turn here, still in flight. */
  readonly gate: Gate;
}

/**
 * A counting gate: llama-server generates for `parallel` requests at once (its slots), and the
 * agent holds the rest here, where they count as waiting and a cancel reaches them before any
 * slot does (the control plane bounds how many are in flight per deployment).
 */
export class Gate {
  private running = 0;
  private readonly waiting: (() => void)[] = [];

  constructor(private readonly limit: number) {}

  /** Requests waiting for a slot. */
  get queued(): number {
    return this.waiting.length;
  }

  /** Resolves with a release once a slot is free; rejects if `signal` aborts first. */
  async acquire(signal: AbortSignal | Cancel): Promise<() => void> {
    if (this.running >= this.limit) {
      await new Promise<void>((resolve, reject) => {
        if (signal.aborted) return reject(signal.reason);
        const go = () => {
          forget();
          resolve();
        };
        const forget = onAbort(signal, () => {
          const i = this.waiting.indexOf(go);
          if (i >= 0) this.waiting.splice(i, 1);
          reject(signal.reason);
        });
        this.waiting.push(go);
      });
    }
    this.running++;
    let released = false;
    return () => {
      if (released) return;
      released = true;
      this.running--;
      this.waiting.shift()?.();
    };
  }
}

export interface DeploymentHostOptions {
  supervisor: Supervisor;
  log: Logger;
  clock?: Clock;
  /** How long a loading runtime has to become healthy (default 120 s). */
  healthDeadlineMs?: number;
  logLimits?: LogLimits;
  /** The node's GPUs now (nvidia-smi), to check a lease's assignment against; none when absent. */
  gpus?: () => Promise<AssignedDevice[]>;
}

const keyOf = (deploymentId: string, revision: bigint, replica: number) => `${deploymentId}#${revision}#${replica}`;

/**
 * Which held runtimes a job or invoke names: one revision, or every one for revision 0; one replica
 * slot, or every one when the server named none (an older server's spec: it placed one per node).
 */
export interface HeldSelector {
  deploymentId: string;
  revision: bigint;
  replica?: number | undefined;
}

function typed(err: unknown): never {
  if (err instanceof EngineError) {
    const f = failureFor(err.code);
    throw new JobFailureError(f.code, err.message, f.retryable);
  }
  throw err;
}

export class DeploymentHost {
  private readonly held = new Map<string, HeldRuntime>();
  /** Loads in progress, so a repeated lease joins the first instead of starting a second runtime. */
  private readonly loading = new Map<string, Promise<HeldRuntime>>();
  private readonly lineListeners = new Set<(deploymentId: string, line: RuntimeLogLine) => void>();
  private readonly idleWaiters = new Set<() => void>();
  private readonly lostListeners = new Set<() => void>();
  readonly clock: Clock;
  readonly logLimits: LogLimits;

  constructor(private readonly opts: DeploymentHostOptions) {
    this.clock = opts.clock ?? systemClock;
    this.logLimits = opts.logLimits ?? defaultLogLimits;
  }

  /** Told when a runtime ends without being asked to; returns what stops the telling. */
  onLost(listener: () => void): () => void {
    this.lostListeners.add(listener);
    return () => this.lostListeners.delete(listener);
  }

  /** What Hello reports. */
  heldDeployments(): MessageInitShape<typeof HeldDeploymentSchema>[] {
    return [...this.held.values()].map((h) => ({
      deploymentId: h.deploymentId,
      revision: h.revision,
      replica: h.replica,
      runtimeId: h.runtime.id,
      healthy: h.runtime.exitStatus() === undefined,
    }));
  }

  /** What heartbeats report: each held replica's requests, and those waiting for its runtime. */
  replicaLoads(): MessageInitShape<typeof ReplicaLoadSchema>[] {
    return [...this.held.values()].map((h) => ({
      deploymentId: h.deploymentId,
      revision: h.revision,
      replica: h.replica,
      inFlight: h.inFlight.size,
      queued: h.gate.queued,
    }));
  }

  /** The held runtimes a job or invoke names. */
  matching(named: HeldSelector): HeldRuntime[] {
    const { deploymentId, revision, replica } = named;
    return [...this.held.values()].filter(
      (h) =>
        h.deploymentId === deploymentId && (revision === 0n || h.revision === revision) && (replica === undefined || h.replica === replica),
    );
  }

  /** The runtime that takes a new invoke: the one named, else the newest revision not draining. */
  forInvoke(named: HeldSelector): HeldRuntime | undefined {
    const candidates = this.matching(named).sort((a, b) => (a.revision > b.revision ? -1 : 1));
    return candidates.find((h) => !h.draining) ?? candidates[0];
  }

  onLine(listener: (deploymentId: string, line: RuntimeLogLine) => void): () => void {
    this.lineListeners.add(listener);
    return () => this.lineListeners.delete(listener);
  }

  /** Verifies the artifacts, starts the runtime and waits for its health; idempotent per revision and replica. */
  async load(spec: DeploymentLoad): Promise<HeldRuntime> {
    const key = keyOf(spec.deploymentId, spec.revision, spec.replica ?? 0);
    const existing = this.held.get(key);
    if (existing !== undefined && existing.runtime.exitStatus() === undefined) {
      if (existing.gpus === gpuKey(spec)) return existing;
      // Placed here again on other GPUs (one it had went missing): the runtime it holds is confined
      // to the old ones, so it gives way to a new one.
      await this.unload({ deploymentId: existing.deploymentId, revision: existing.revision, replica: existing.replica });
    }
    const pending = this.loading.get(key);
    if (pending !== undefined) return pending;
    const started = this.start(spec, key).finally(() => this.loading.delete(key));
    this.loading.set(key, started);
    return started;
  }

  /** Layered health of the named runtimes: process, endpoint, and whether it takes invokes. */
  async health(named: HeldSelector): Promise<{ healthy: boolean; detail: string }> {
    const held = this.matching(named);
    if (held.length === 0) throw new JobFailureError(JobFailureCode.NOT_FOUND, notHeld(named), false);
    const parts: string[] = [];
    let healthy = true;
    for (const h of held) {
      const exit = h.runtime.exitStatus();
      const endpoint = exit === undefined && (await this.opts.supervisor.health(h.runtime.id).catch(() => undefined))?.state === "healthy";
      healthy &&= endpoint;
      const process = exit === undefined ? "running" : `exited (code ${exit.code}, signal ${exit.signal})`;
      parts.push(
        `revision ${h.revision} replica ${h.replica}: process ${process}; endpoint ${endpoint ? "healthy" : "unhealthy"}; ${h.draining ? "draining" : "serving"}; ${h.inFlight.size} in flight`,
      );
    }
    return { healthy, detail: parts.join("; ").slice(0, 1024) };
  }

  /** Stops taking new invokes on the named runtimes and waits for those in flight, up to `timeoutMs`. */
  async drain(named: HeldSelector, timeoutMs: number, signal?: AbortSignal): Promise<number> {
    const held = this.matching(named);
    const running = new Set<AbortController>();
    for (const h of held) {
      h.draining = true;
      for (const c of h.inFlight) running.add(c);
    }
    const stillRunning = () => held.reduce((n, h) => n + [...h.inFlight].filter((c) => running.has(c)).length, 0);
    const deadline = this.clock.now() + timeoutMs;
    while (stillRunning() > 0 && this.clock.now() < deadline && !signal?.aborted) {
      await new Promise<void>((resolve) => {
        const timer = new AbortController();
        const done = () => {
          this.idleWaiters.delete(done);
          timer.abort();
          resolve();
        };
        this.idleWaiters.add(done);
        void this.clock.sleep(Math.max(0, deadline - this.clock.now()), timer.signal, signal).then(done, done);
      });
    }
    return running.size - stillRunning();
  }

  /** Stops the named runtimes; the bytes of memory they held. */
  async unload(named: HeldSelector): Promise<bigint> {
    let freed = 0n;
    for (const h of this.matching(named)) {
      const memory = await h.runtime.memory();
      this.held.delete(keyOf(h.deploymentId, h.revision, h.replica));
      for (const c of h.inFlight) c.abort(new Error("the deployment was unloaded"));
      await this.opts.supervisor.stop(h.runtime.id).catch(typed);
      freed += BigInt(memory?.rssBytes ?? 0);
      this.opts.log.info(
        { deploymentId: h.deploymentId, revision: h.revision, replica: h.replica, runtimeId: h.runtime.id },
        "deployment unloaded",
      );
    }
    return freed;
  }

  /** An invoke started (true) or ended (false) on `h`; drains wait for the ends. */
  track(h: HeldRuntime, cancel: Cancel, running: boolean): void {
    if (running) h.inFlight.add(cancel);
    else {
      h.inFlight.delete(cancel);
      for (const wake of [...this.idleWaiters]) wake();
    }
  }

  private async start(spec: DeploymentLoad, key: string): Promise<HeldRuntime> {
    const profile = spec.profile;
    if (profile === undefined || profile.engine === ProtoEngineKind.UNSPECIFIED) {
      throw new JobFailureError(JobFailureCode.PROFILE_INVALID, "the lease carries no resolved runtime profile", false);
    }
    const engine = engineNameOfKind[profile.engine];
    if (engine === undefined || !this.opts.supervisor.engines().includes(engine)) {
      throw new JobFailureError(
        JobFailureCode.ENGINE_NOT_SUPPORTED,
        `engine ${ProtoEngineKind[profile.engine] ?? profile.engine} is not run by this agent`,
        false,
      );
    }
    const gpus = spec.gpus.map((g) => ({ uuid: g.uuid, index: g.index }));
    if (gpus.length > 0) {
      const unavailable = unavailableGpus(gpus, (await this.opts.gpus?.()) ?? []);
      if (unavailable !== undefined) throw new JobFailureError(JobFailureCode.GPU_UNAVAILABLE, unavailable, false);
    }
    const modelPath = await verifiedModelPath(spec);
    // The control plane's choice (priced by placement), else the profile's (a server before it), else 1.
    const parallel = spec.parallel || profile.parallel || 1;
    const lines = new LogTail(
      spec.revision,
      this.logLimits,
      () => this.clock.now(),
      (line) => {
        for (const l of this.lineListeners) l(spec.deploymentId, line);
      },
    );
    const runtime = await this.opts.supervisor
      .start(engine, {
        modelPath,
        params: {
          ...(profile.contextSize > 0 ? { contextSize: profile.contextSize } : {}),
          ...(profile.threads > 0 ? { threads: profile.threads } : {}),
          ...(profile.gpuLayersAll ? { gpuLayers: "all" as const } : profile.gpuLayers > 0 ? { gpuLayers: profile.gpuLayers } : {}),
          ...(engine === "llama.cpp" ? { parallel } : {}),
          ...(engine === "llama.cpp" && profile.batchSize > 0 ? { batchSize: profile.batchSize } : {}),
          ...(engine === "llama.cpp" && profile.embeddings ? { embeddings: true } : {}),
        },
        gpus,
        healthDeadlineMs: this.opts.healthDeadlineMs ?? 120_000,
        onOutput: (stream, chunk) => lines.write(stream, chunk),
      })
      .catch(typed);
    const held: HeldRuntime = {
      deploymentId: spec.deploymentId,
      revision: spec.revision,
      replica: spec.replica ?? 0,
      runtime,
      gpus: gpuKey(spec),
      draining: false,
      inFlight: new Set(),
      logs: lines,
      // The llama.cpp engine's llama-server has `parallel` slots; external servers (vLLM, a
      // llama-server of the operator's) schedule concurrent requests themselves.
      gate: new Gate(engine === "llama.cpp" ? parallel : Number.POSITIVE_INFINITY),
    };
    this.held.set(key, held);
    // A runtime that dies is no longer held: the session tells the control plane at once (and
    // Hello stops naming it), which stops routing to it and loads it again.
    void runtime.exited.then((exit) => {
      if (this.held.get(key) !== held) return;
      this.held.delete(key);
      for (const c of held.inFlight) c.abort(new Error("the runtime exited"));
      if (exit.stopped) return;
      this.opts.log.warn(
        { deploymentId: spec.deploymentId, revision: spec.revision, replica: held.replica, code: exit.code, signal: exit.signal },
        "deployment runtime exited",
      );
      for (const tell of this.lostListeners) tell();
    });
    this.opts.log.info(
      { deploymentId: spec.deploymentId, revision: spec.revision, replica: held.replica, runtimeId: runtime.id, loadMs: runtime.loadMs },
      "deployment loaded",
    );
    return held;
  }
}

/** A lease's GPU assignment as HeldRuntime.gpus records it. */
function gpuKey(spec: DeploymentLoad): string {
  return spec.gpus
    .map((g) => g.uuid)
    .sort()
    .join(",");
}

export function notHeld({ deploymentId, revision, replica }: HeldSelector): string {
  const which = `${revision === 0n ? "" : ` revision ${revision}`}${replica === undefined ? "" : ` replica ${replica}`}`;
  return `deployment ${deploymentId}${which} is not held on this node`;
}
