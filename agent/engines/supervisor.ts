// Starts, watches and stops runtime processes for the closed set of engines the agent implements.
// Each runtime is its own process group on loopback: started with a clean environment, healthy
// within a deadline or stopped, measured (load time, RSS), stopped with SIGTERM then SIGKILL, and
// recorded in a registry so a later agent can stop the ones an earlier agent left behind.
import { spawn, type ChildProcess } from "node:child_process";
import { randomUUID } from "node:crypto";
import { existsSync } from "node:fs";
import { lstat } from "node:fs/promises";
import { createServer } from "node:net";
import { isAbsolute, normalize } from "node:path";
import { fileURLToPath } from "node:url";
import { systemClock, type Clock } from "../../common/clock.js";
import { OpenAiClient } from "./openai-client.js";
import { buildArgv, TemplateError, validateTemplate, type OpenAiHttpTemplate } from "./openai-http.js";
import { readMemory, readStat, type ProcessMemory } from "./proc.js";
import { cudaBackend, gpuEnv, type AssignedDevice } from "./gpus.js";
import { RuntimeRegistry, type RuntimeRecord } from "./registry.js";
import { inspectGgufFile, type GgufInspection } from "./llama-cpp/gguf-header.js";

import { embeddingEngineNames, engineNames as engineKinds, type EngineName } from "../../common/engines.js";

export type EngineKind = EngineName;

export interface EngineParams {
  contextSize?: number;
  threads?: number;
  /** llama.cpp: requests generated at once, each in a sequence of its own with `contextSize` tokens. */
  parallel?: number;
  /** llama.cpp: tokens per decode batch. */
  batchSize?: number;
  /** llama.cpp: serve /v1/embeddings too (mean-pooled); it slows generation, so only when asked. */
  embeddings?: boolean;
  /** llama.cpp: layers offloaded to the GPUs, or every one; absent for the CPU. */
  gpuLayers?: number | "all";
}

export type EngineErrorCode =
  | "engine_not_supported"
  | "invalid_params"
  | "model_not_found"
  | "process_failed_to_start"
  | "exited_before_ready"
  | "health_deadline_exceeded"
  | "runtime_not_found";

/** A typed engine failure; later layers map the codes onto the contract's normalised failures. */
export class EngineError extends Error {
  constructor(
    readonly code: EngineErrorCode,
    message: string,
  ) {
    super(message);
    this.name = "EngineError";
  }
}

export interface ExitStatus {
  code: number | null;
  signal: NodeJS.Signals | null;
  /** True when the supervisor stopped it; false is a crash. */
  stopped: boolean;
}

export interface Runtime {
  readonly id: string;
  readonly engine: EngineKind;
  readonly pid: number;
  readonly baseUrl: string;
  readonly modelPath: string;
  readonly startedAt: Date;
  /** From spawning the process to its first healthy answer. */
  readonly loadMs: number;
  /** Where the model runs, when the engine is ours (llama.cpp): "cpu" or "cuda". */
  readonly backend: "cpu" | "cuda" | undefined;
  /** Tokens each sequence holds, prompt and answer together, when the engine is ours (llama.cpp). */
  readonly contextSize: number | undefined;
  /** The same OpenAI-compatible client for every engine. */
  readonly client: OpenAiClient;
  /** Resolves when the process ends, for whatever reason. */
  readonly exited: Promise<ExitStatus>;
  /** Undefined while the process lives. */
  exitStatus(): ExitStatus | undefined;
  /** RSS and peak RSS of the runtime process, or undefined once it is gone. */
  memory(): Promise<ProcessMemory | undefined>;
}

export type RuntimeHealth = { state: "healthy" | "unhealthy" } | { state: "exited"; exit: ExitStatus };

export interface StartOptions {
  modelPath: string;
  params?: EngineParams;
  /** How long the runtime has to load and answer its health check (default 120 s). */
  healthDeadlineMs?: number;
  /** Hears the runtime's output as it is written (a deployment's live logs). */
  onOutput?: (stream: "stdout" | "stderr", chunk: Buffer) => void;
  /** The GPUs it may use (CUDA_VISIBLE_DEVICES, {gpus}); absent or empty for none. */
  gpus?: AssignedDevice[];
}

export interface OrphanReport {
  record: RuntimeRecord;
  /** stopped: it was running and is not any more; gone: it had already ended. */
  outcome: "stopped" | "gone";
}

export interface SupervisorOptions {
  /** The runtime registry file, beside the agent's state. */
  registryPath: string;
  /** The operator's command template for `openai-http`; without it that engine is not offered. */
  openAiHttp?: OpenAiHttpTemplate;
  clock?: Clock;
  /** Time between SIGTERM and SIGKILL (default 10 s). */
  stopGraceMs?: number;
  /** This install carries llama.cpp's CUDA build and the node has NVIDIA GPUs: advertise llama.cpp+cuda. */
  llamaCuda?: boolean;
}

// The llama.cpp engine's runtime is llama.cpp's own llama-server (scripts/build-llama-server.mjs):
// beside the built agent (scripts/build.mjs defines MODELFORGE_LLAMA_SERVER), or in the checkout's
// build/ when the agent runs from source.
declare const MODELFORGE_LLAMA_SERVER: string | undefined;
export const llamaServerPath = fileURLToPath(
  typeof MODELFORGE_LLAMA_SERVER === "string"
    ? new URL(MODELFORGE_LLAMA_SERVER, import.meta.url)
    : new URL("../../build/llama-server/llama-server", import.meta.url),
);
/** What llama-server logs once it listens: the port it was given (it binds port 0 itself, so no other process can take it first). */
const llamaServerListening = /listening on http:\/\/127\.0\.0\.1:(\d{1,5})\b/;
const loopback = "127.0.0.1";
/** How the agent advertises that its llama.cpp engine can offload to CUDA GPUs (placement asks for it). */
export const llamaCudaBackend = "llama.cpp+cuda";
const pollMs = 100;
const tailBytes = 4096;

/** The most requests one llama.cpp runtime generates at once (the contract's bound on a profile's parallel). */
export const maxParallel = 256;

/** Pure check of engine parameters from a runtime profile. */
export function validateParams(params: EngineParams): EngineParams {
  const within = (v: number | undefined, min: number, max: number) => v === undefined || (Number.isInteger(v) && v >= min && v <= max);
  if (!within(params.contextSize, 16, 1 << 20))
    throw new EngineError("invalid_params", "contextSize must be an integer from 16 to 1048576");
  if (!within(params.threads, 1, 1024)) throw new EngineError("invalid_params", "threads must be an integer from 1 to 1024");
  if (!within(params.parallel, 1, maxParallel))
    throw new EngineError("invalid_params", `parallel must be an integer from 1 to ${maxParallel}`);
  if (!within(params.batchSize, 1, 65_536)) throw new EngineError("invalid_params", "batchSize must be an integer from 1 to 65536");
  if (params.gpuLayers !== "all" && !within(params.gpuLayers, 1, 1024))
    throw new EngineError("invalid_params", "gpuLayers must be an integer from 1 to 1024, or all");
  return params;
}

interface Held extends Runtime {
  child: ChildProcess;
  markStopping(): void;
}

export class Supervisor {
  private readonly held = new Map<string, Held>();
  /** Runtimes of an earlier agent that reapOrphans found, so a later health or unload can say so. */
  private readonly reaped = new Map<string, OrphanReport>();
  private readonly registry: RuntimeRegistry;
  private readonly clock: Clock;
  private readonly graceMs: number;

  constructor(private readonly options: SupervisorOptions) {
    this.registry = new RuntimeRegistry(options.registryPath);
    this.clock = options.clock ?? systemClock;
    this.graceMs = options.stopGraceMs ?? 10_000;
    // A bad template is the operator's configuration error: refuse it when the agent starts.
    if (options.openAiHttp) validateTemplate(options.openAiHttp);
  }

  /** The engines this agent can run, to advertise: llama.cpp when its llama-server is installed, openai-http when configured. */
  engines(): EngineKind[] {
    return engineKinds.filter((k) => (k === "openai-http" ? this.options.openAiHttp !== undefined : existsSync(llamaServerPath)));
  }

  /** What the agent advertises: the engines, and llama.cpp's CUDA backend when it has one. */
  advertisedEngines(): string[] {
    const engines: string[] = this.engines();
    return this.options.llamaCuda === true && engines.includes("llama.cpp") ? [...engines, llamaCudaBackend] : engines;
  }

  /** The engines among engines() whose runtimes serve embeddings, to advertise. */
  embeddingEngines(): EngineKind[] {
    return this.engines().filter((k) => embeddingEngineNames.includes(k));
  }

  list(): Runtime[] {
    return [...this.held.values()];
  }

  get(id: string): Runtime {
    const r = this.held.get(id);
    if (r === undefined) throw new EngineError("runtime_not_found", `no runtime ${id}`);
    return r;
  }

  async start(engine: EngineKind, options: StartOptions): Promise<Runtime> {
    if (!this.engines().includes(engine)) throw new EngineError("engine_not_supported", `engine ${engine} is not available on this node`);
    const params = validateParams(options.params ?? {});
    await checkModelPath(options.modelPath, engine);
    const id = randomUUID();
    const plan = await this.plan(engine, id, options.modelPath, params, options.gpus ?? []);
    const began = performance.now();
    // Resolves once the registry forgets it, so whoever awaited the exit sees a clean registry.
    const proc = new RuntimeProcess(plan, options.onOutput, () => this.registry.remove(id).catch(() => undefined));
    if (proc.pid === undefined) {
      await proc.exited;
      throw new EngineError("process_failed_to_start", `the ${engine} runtime could not be started`);
    }
    const pid = proc.pid;
    const startedAt = new Date(this.clock.now());
    const stat = await readStat(pid);
    await this.registry.add({
      id,
      engine,
      pid,
      startTicks: stat?.startTicks ?? 0,
      modelPath: options.modelPath,
      startedAt: startedAt.toISOString(),
    });
    // It may have ended while being recorded, its removal queued before the record.
    if (proc.exit) await this.registry.remove(id);
    try {
      const client = await this.untilReady(plan, proc, this.clock.now() + (options.healthDeadlineMs ?? 120_000));
      const runtime: Held = {
        id,
        engine,
        pid,
        baseUrl: client.baseUrl,
        modelPath: options.modelPath,
        startedAt,
        loadMs: performance.now() - began,
        backend: plan.backend,
        contextSize: plan.contextSize,
        client,
        exited: proc.exited,
        exitStatus: () => proc.exit,
        memory: () => (proc.exit ? Promise.resolve(undefined) : readMemory(pid)),
        child: proc.child,
        markStopping: () => (proc.stopping = true),
      };
      this.held.set(id, runtime);
      return runtime;
    } catch (err) {
      proc.stopping = true;
      await this.terminate(proc.child, proc.exited);
      if (err instanceof EngineError && err.code === "health_deadline_exceeded") throw err;
      // "exit" can come before the last of its output is read: the reason is in that output.
      await Promise.race([proc.outputClosed, this.clock.sleep(1_000)]);
      const status = proc.exit as ExitStatus | undefined;
      throw new EngineError(
        "exited_before_ready",
        `the ${engine} runtime exited before it was ready (code ${status?.code ?? "none"}, signal ${status?.signal ?? "none"}): ${reasonLine(proc.tail)}`,
      );
    }
  }

  /** Waits for the runtime's port, then its health: its client once it answers healthy by the deadline. */
  private async untilReady(plan: LaunchPlan, proc: RuntimeProcess, deadline: number): Promise<OpenAiClient> {
    const port = plan.port === "announced" ? await this.waitForPort(proc, deadline) : plan.port;
    const client = new OpenAiClient(`http://${loopback}:${port}`);
    await this.waitForHealth(client, plan.healthPath, deadline, proc.gone.signal);
    if (proc.exit) throw new Error("exited");
    return client;
  }

  /** Asks a held runtime's health endpoint; a crashed runtime reports how it ended. */
  async health(id: string): Promise<RuntimeHealth> {
    const r = this.held.get(id);
    if (r === undefined) throw new EngineError("runtime_not_found", `no runtime ${id}`);
    const exit = r.exitStatus();
    if (exit) return { state: "exited", exit };
    return {
      state: (await r.client.healthy(r.engine === "openai-http" ? (this.options.openAiHttp?.healthPath ?? "/health") : "/health"))
        ? "healthy"
        : "unhealthy",
    };
  }

  /**
   * SIGTERM, then SIGKILL after the grace period; resolves once the process is gone and forgets
   * the runtime. A runtime that already crashed answers how it ended.
   */
  async stop(id: string): Promise<ExitStatus> {
    const r = this.held.get(id);
    if (r === undefined) throw new EngineError("runtime_not_found", `no runtime ${id}`);
    r.markStopping();
    try {
      return await this.terminate(r.child, r.exited);
    } finally {
      this.held.delete(id);
    }
  }

  async stopAll(): Promise<void> {
    await Promise.all([...this.held.keys()].map((id) => this.stop(id).catch(() => undefined)));
  }

  /**
   * Stops the runtimes the registry names that this supervisor does not hold: an earlier agent
   * started them. Only a process whose start time still matches its record is signalled, so a
   * reused pid is never hit.
   */
  async reapOrphans(): Promise<OrphanReport[]> {
    const reports: OrphanReport[] = [];
    for (const record of await this.registry.read()) {
      if (this.held.has(record.id)) continue;
      const alive = async () => (await readStat(record.pid))?.startTicks === record.startTicks;
      if (!(await alive())) {
        reports.push({ record, outcome: "gone" });
        continue;
      }
      killGroup(record.pid, "SIGTERM");
      if (!(await this.waitUntil(async () => !(await alive()), this.graceMs))) {
        killGroup(record.pid, "SIGKILL");
        await this.waitUntil(async () => !(await alive()), this.graceMs);
      }
      reports.push({ record, outcome: "stopped" });
    }
    await this.registry.retain((r) => this.held.has(r.id));
    for (const r of reports) this.reaped.set(r.record.id, r);
    return reports;
  }

  /** What reapOrphans did with runtime `id`, if it was an earlier agent's. */
  orphan(id: string): OrphanReport | undefined {
    return this.reaped.get(id);
  }

  private async terminate(child: ChildProcess, exited: Promise<ExitStatus>): Promise<ExitStatus> {
    if (child.exitCode !== null || child.signalCode !== null) return exited;
    killGroup(child.pid!, "SIGTERM");
    const timer = new AbortController();
    const ended = await Promise.race([exited, this.clock.sleep(this.graceMs, timer.signal).then(() => undefined)]);
    timer.abort();
    if (ended) return ended;
    if (child.exitCode === null && child.signalCode === null) killGroup(child.pid!, "SIGKILL");
    return exited;
  }

  private async plan(engine: EngineKind, id: string, modelPath: string, params: EngineParams, gpus: AssignedDevice[]): Promise<LaunchPlan> {
    const base = { PATH: process.env.PATH ?? "/usr/bin:/bin", HOME: process.env.HOME ?? "/tmp" };
    if (engine === "llama.cpp") return llamaServerPlan(id, modelPath, params, gpus, base);
    const template = this.options.openAiHttp!;
    const port = await freePort();
    let argv: string[];
    try {
      const { contextSize, threads } = params;
      argv = buildArgv(template, { model: modelPath, port, host: loopback, contextSize, threads, gpus: gpus.map((g) => g.index) });
    } catch (err) {
      if (err instanceof TemplateError) throw new EngineError("invalid_params", err.message);
      throw err;
    }
    const [command, ...args] = argv;
    // The assignment overrides whatever the template's env says about devices.
    const env = { ...base, ...template.env, ...gpuEnv(gpus) };
    return {
      command: command!,
      args,
      env,
      port,
      healthPath: template.healthPath ?? "/health",
      backend: undefined,
      contextSize: undefined,
      notes: [],
    };
  }

  /** The port the runtime announced in its output, by the deadline. */
  private async waitForPort(proc: RuntimeProcess, deadline: number): Promise<number> {
    const timer = new AbortController();
    const port = await Promise.race([
      proc.announced,
      this.clock.sleep(Math.max(0, deadline - this.clock.now()), proc.gone.signal, timer.signal).then(() => undefined),
    ]);
    timer.abort();
    if (port === undefined) {
      if (proc.gone.signal.aborted) throw new Error("exited");
      throw new EngineError("health_deadline_exceeded", "the runtime did not announce its port before the deadline");
    }
    return port;
  }

  private async waitForHealth(client: OpenAiClient, path: string, deadline: number, gone: AbortSignal): Promise<void> {
    while (!gone.aborted) {
      const left = deadline - this.clock.now();
      if (left <= 0) throw new EngineError("health_deadline_exceeded", "the runtime did not become healthy before the deadline");
      if (await client.healthy(path, Math.min(left, 5_000))) return;
      await this.clock.sleep(pollMs, gone);
    }
    throw new Error("exited");
  }

  private async waitUntil(done: () => Promise<boolean>, ms: number): Promise<boolean> {
    const deadline = this.clock.now() + ms;
    while (this.clock.now() < deadline) {
      if (await done()) return true;
      await this.clock.sleep(pollMs);
    }
    return done();
  }
}

/**
 * One spawned runtime process, in its own process group: the tail of its output (for the reason it
 * failed), its output handed on by stream, the port it announces (when it chooses its own), and how
 * it ended. A process whose spawn failed ends at once, with no pid.
 */
class RuntimeProcess {
  readonly child: ChildProcess;
  readonly exited: Promise<ExitStatus>;
  /** Aborted once the process has ended. */
  readonly gone = new AbortController();
  /** The port the process announced in its output (a plan with port "announced"). */
  readonly announced: Promise<number>;
  /** Set before stopping it: its end is then not a crash. */
  stopping = false;
  exit: ExitStatus | undefined;
  /** Resolves once its stdout and stderr are closed (all its output read), or at once when the spawn failed. */
  readonly outputClosed: Promise<void>;
  tail = "";
  private readonly keepTail = (c: Buffer) => (this.tail = (this.tail + c.toString()).slice(-tailBytes));

  constructor(plan: LaunchPlan, onOutput: StartOptions["onOutput"], forget: () => Promise<unknown>) {
    this.child = spawn(plan.command, plan.args, {
      env: plan.env,
      // Its own process group: stop() reaches every process the engine starts.
      detached: true,
      stdio: ["ignore", "pipe", "pipe"],
    });
    for (const note of plan.notes) onOutput?.("stderr", Buffer.from(`modelforge: ${note}\n`));
    for (const stream of ["stdout", "stderr"] as const) {
      this.child[stream]!.on("data", this.keepTail);
      if (onOutput !== undefined) this.child[stream]!.on("data", (c: Buffer) => onOutput(stream, c));
    }
    this.announced = plan.port === "announced" ? announcedPort(this.child) : new Promise<number>(() => undefined);
    this.exited = new Promise<ExitStatus>((resolve) => {
      const done = (code: number | null, signal: NodeJS.Signals | null) => {
        if (this.exit) return;
        this.exit = { code, signal, stopped: this.stopping };
        // The group may outlive its leader (an external server's workers): end it too. Never the
        // bare pid: it is free for reuse now.
        if (this.child.pid !== undefined) killGroup(this.child.pid, "SIGKILL", false);
        void forget().then(() => resolve(this.exit!));
      };
      this.child.once("exit", done);
      // Only a failed spawn counts as an end; a process that has a pid ends with "exit".
      this.child.once("error", () => {
        if (this.child.pid === undefined) done(null, null);
      });
    });
    void this.exited.then(() => this.gone.abort());
    this.outputClosed = new Promise<void>((resolve) => {
      this.child.once("close", () => resolve());
      this.child.once("error", () => {
        if (this.child.pid === undefined) resolve();
      });
    });
  }

  get pid(): number | undefined {
    return this.child.pid;
  }
}

/** The port llama-server says it listens on, from the first of its output lines that says so. */
function announcedPort(child: ChildProcess): Promise<number> {
  return new Promise((resolve) => {
    const readers = ([child.stdout!, child.stderr!] as const).map((stream) => {
      let partial = "";
      const read = (chunk: Buffer) => {
        // Only whole lines, and only until the port is known: the output itself flows on untouched.
        const lines = (partial + chunk.toString("utf8")).split("\n");
        partial = lines.pop()!.slice(-4096);
        for (const line of lines) {
          const port = Number(llamaServerListening.exec(line)?.[1]);
          if (port > 0 && port < 65_536) {
            for (const r of readers) r.stream.off("data", r.read);
            resolve(port);
            return;
          }
        }
      };
      stream.on("data", read);
      return { stream, read };
    });
  });
}

interface LaunchPlan {
  command: string;
  args: string[];
  env: Record<string, string>;
  /** A fixed port, or "announced": the process binds one itself and logs it (llama-server). */
  port: number | "announced";
  healthPath: string;
  /** Where the model runs, when the engine is ours. */
  backend: "cpu" | "cuda" | undefined;
  /** Tokens per sequence, when the engine is ours. */
  contextSize: number | undefined;
  /** Lines for the runtime's log before its own (why it runs on the CPU though GPUs were asked for). */
  notes: string[];
}

/**
 * llama-server for a profile's parameters. Every sequence gets the profile's context (llama-server
 * splits its context among them), the layers go to the GPUs only with an assignment and a CUDA
 * backend this node can load, and nothing is left for llama-server to fit on its own: placement
 * already priced what the profile asks for.
 */
async function llamaServerPlan(
  id: string,
  modelPath: string,
  params: EngineParams,
  gpus: AssignedDevice[],
  base: Record<string, string>,
): Promise<LaunchPlan> {
  let model: GgufInspection;
  try {
    model = await inspectGgufFile(modelPath);
  } catch (err) {
    throw new EngineError("exited_before_ready", `the model cannot be loaded: ${(err as Error).message}`);
  }
  const parallel = params.parallel ?? 1;
  const context = params.contextSize ?? model.trainedContextLength ?? defaultContext;
  const args = ["--model", modelPath, "--alias", id, "--host", loopback, "--port", "0", "--no-webui", "--fit", "off"];
  args.push("--parallel", String(parallel), "--ctx-size", String(context * parallel));
  if (params.threads !== undefined) args.push("--threads", String(params.threads), "--threads-batch", String(params.threads));
  if (params.batchSize !== undefined) args.push("--batch-size", String(params.batchSize), "--ubatch-size", String(params.batchSize));
  // /v1/embeddings from the same runtime, mean-pooled (a generative model has no pooling of its own).
  if (params.embeddings === true) args.push("--embeddings", "--pooling", "mean");
  const notes: string[] = [];
  let backend: "cpu" | "cuda" = "cpu";
  let cuda: string | undefined;
  if (params.gpuLayers !== undefined && gpus.length > 0) {
    const found = await cudaBackend();
    if (found.library !== undefined) {
      cuda = found.library;
      backend = "cuda";
    } else notes.push(`running on the CPU: ${found.reason}`);
  }
  args.push("--gpu-layers", cuda === undefined ? "0" : String(params.gpuLayers));
  const env = { ...base, ...(cuda !== undefined ? { GGML_BACKEND_PATH: cuda, ...gpuEnv(gpus) } : { CUDA_VISIBLE_DEVICES: "" }) };
  return { command: llamaServerPath, args, env, port: "announced", healthPath: "/health", backend, contextSize: context, notes };
}

/** The context per sequence of a model whose header names none. */
const defaultContext = 4096;

/** The model must be a real file (llama.cpp) or a file or directory (external servers), not a link. */
async function checkModelPath(path: string, engine: EngineKind): Promise<void> {
  if (!isAbsolute(path) || normalize(path) !== path || path.includes("\0")) {
    throw new EngineError("invalid_params", "the model path must be an absolute, normalised path");
  }
  const st = await lstat(path).catch(() => undefined);
  const ok = st !== undefined && (st.isFile() || (engine === "openai-http" && st.isDirectory()));
  if (!ok) throw new EngineError("model_not_found", "the model path is not a regular file or directory");
}

/** Signals a whole process group, or (when `orLeader`) the lone process when it leads none. */
function killGroup(pid: number, signal: NodeJS.Signals, orLeader = true): void {
  try {
    process.kill(-pid, signal);
  } catch {
    if (!orLeader) return;
    try {
      process.kill(pid, signal);
    } catch {
      /* already gone */
    }
  }
}

/** A loopback port free right now, for servers that must be told theirs. */
function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const s = createServer();
    s.once("error", reject);
    s.listen(0, loopback, () => {
      const address = s.address();
      s.close(() => (typeof address === "object" && address ? resolve(address.port) : reject(new Error("no port"))));
    });
  });
}

/**
 * The line of a runtime's last output that says why it stopped: the last one naming an error or a
 * failure, else the last one. llama-server logs from a thread of its own, so its clean-up notice
 * may come after the error as well as before it.
 */
function reasonLine(text: string): string {
  const lines = text.trim().split("\n").reverse();
  const telling = lines.find((l) => /error|fail/i.test(l)) ?? lines[0] ?? "";
  return telling.slice(0, 300);
}
