// runtime.probe.v1, runtime.health.v1 and runtime.unload.v1 on the agent's supervised engines. A
// probe loads only the server-resolved artifacts (each digest re-verified first), runs the fixed,
// versioned probe input and unloads; health and unload act on a runtime the agent holds.
import { create } from "@bufbuild/protobuf";
import { DurationSchema, type Duration } from "@bufbuild/protobuf/wkt";
import type { Logger } from "pino";
import { EngineKind as ProtoEngineKind, JobFailureCode, ProbeInput, type JobSpec } from "../../gen/proto/modelforge/jobs/v1/jobs_pb.js";
import { EngineError, type EngineErrorCode, type OrphanReport, type Runtime, type Supervisor } from "../engines/supervisor.js";
import { GpuMemorySampler } from "../engines/gpu-memory.js";
import type { RunNvidiaSmiOptions } from "../collectors/nvidia-smi.js";
import { systemClock, type Clock } from "../../common/clock.js";
import { JobFailureError, type JobHandler, type JobHandlerResult } from "../jobs/registry.js";
import { engineNameOfKind } from "../../common/engines.js";
import { verifiedModelPath } from "./leased-model.js";

/** The fixed probe inputs the contract defines; never free text. */
export const probeInputs: Record<ProbeInput.COMPLETION_V1, { prompt: string; maxTokens: number; temperature: number }> = {
  [ProbeInput.COMPLETION_V1]: { prompt: "The quick brown fox", maxTokens: 16, temperature: 0 },
};

/** Pure mapping of the engine layer's failures onto the contract's normalised codes. */
export function failureFor(code: EngineErrorCode): { code: JobFailureCode; retryable: boolean } {
  switch (code) {
    case "engine_not_supported":
      return { code: JobFailureCode.ENGINE_NOT_SUPPORTED, retryable: false };
    case "invalid_params":
      return { code: JobFailureCode.PROFILE_INVALID, retryable: false };
    case "model_not_found":
    case "runtime_not_found":
      return { code: JobFailureCode.NOT_FOUND, retryable: false };
    case "health_deadline_exceeded":
      return { code: JobFailureCode.HEALTH_DEADLINE_EXCEEDED, retryable: true };
    case "process_failed_to_start":
    case "exited_before_ready":
      return { code: JobFailureCode.MODEL_LOAD_FAILED, retryable: false };
  }
}

function typed(err: unknown): never {
  if (err instanceof EngineError) {
    const f = failureFor(err.code);
    throw new JobFailureError(f.code, err.message, f.retryable);
  }
  throw err;
}

/** A Duration from fractional milliseconds; nanos must be an integer on the wire. */
export function durationOf(ms: number): Duration {
  const nanosTotal = Math.max(0, Math.round(ms * 1e6));
  return create(DurationSchema, { seconds: BigInt(Math.floor(nanosTotal / 1e9)), nanos: nanosTotal % 1e9 });
}

export interface RuntimeOptions {
  supervisor: Supervisor;
  log: Logger;
  /** How long a probed runtime has to become healthy (default 120 s). */
  healthDeadlineMs?: number;
  clock?: Clock;
  /** How nvidia-smi is run for GPU memory evidence (default: looked up on PATH). */
  nvidiaSmi?: RunNvidiaSmiOptions;
  /** Time between two GPU memory samples while a probe runs (default 500 ms). */
  gpuSampleIntervalMs?: number;
}

interface Measured {
  ttftMs: number;
  tokens: number;
  tokensPerSecond: number;
}

async function runProbe(runtime: Runtime, input: (typeof probeInputs)[ProbeInput.COMPLETION_V1]): Promise<Measured> {
  const sent = performance.now();
  let first: number | undefined;
  let last = sent;
  let counted = 0;
  let reported: number | undefined;
  for await (const chunk of runtime.client.streamCompletion(input.prompt, {
    max_tokens: input.maxTokens,
    temperature: input.temperature,
  })) {
    if (chunk.choices.some((c) => c.text !== "")) {
      last = performance.now();
      first ??= last;
      counted++;
    }
    if (chunk.timings) reported = chunk.timings.predicted_n;
  }
  const tokens = reported ?? counted;
  if (first === undefined || tokens === 0)
    throw new JobFailureError(JobFailureCode.INFERENCE_FAILED, "the probe input produced no tokens", true);
  const spanMs = last - first;
  return { ttftMs: first - sent, tokens, tokensPerSecond: spanMs > 0 ? ((tokens - 1) * 1000) / spanMs : 0 };
}

export function runtimeProbeHandler(opts: RuntimeOptions): JobHandler {
  return async (spec: JobSpec, ctx): Promise<JobHandlerResult> => {
    if (spec.kind.case !== "runtimeProbe") throw new JobFailureError(JobFailureCode.INVALID_SPEC, "not a runtime probe", false);
    const probe = spec.kind.value;
    const log = opts.log.child({ jobId: ctx.jobId, attempt: ctx.attempt, profile: probe.runtimeProfile });
    const profile = probe.profile;
    if (profile === undefined || profile.engine === ProtoEngineKind.UNSPECIFIED) {
      throw new JobFailureError(JobFailureCode.PROFILE_INVALID, "the lease carries no resolved runtime profile", false);
    }
    const engine = engineNameOfKind[profile.engine];
    if (engine === undefined || !opts.supervisor.engines().includes(engine)) {
      throw new JobFailureError(
        JobFailureCode.ENGINE_NOT_SUPPORTED,
        `engine ${ProtoEngineKind[profile.engine] ?? profile.engine} is not run by this agent`,
        false,
      );
    }
    const inputId = probe.probeInput === ProbeInput.UNSPECIFIED ? ProbeInput.COMPLETION_V1 : probe.probeInput;
    const input = probeInputs[inputId as ProbeInput.COMPLETION_V1];
    if (input === undefined) throw new JobFailureError(JobFailureCode.INVALID_SPEC, `unknown probe input ${inputId}`, false);
    const modelPath = await verifiedModelPath(probe);
    await ctx.progress({ message: "loading" });
    const runtime = await opts.supervisor
      .start(engine, {
        modelPath,
        params: {
          ...(profile.contextSize > 0 ? { contextSize: profile.contextSize } : {}),
          ...(profile.threads > 0 ? { threads: profile.threads } : {}),
        },
        healthDeadlineMs: opts.healthDeadlineMs ?? 120_000,
      })
      .catch(typed);
    let keep = false;
    const gpu = new GpuMemorySampler(runtime.pid, opts.clock ?? systemClock, opts.gpuSampleIntervalMs ?? 500, opts.nvidiaSmi);
    try {
      await ctx.progress({ message: "probing" });
      const measured = await runProbe(runtime, input).catch((err: unknown) => {
        if (err instanceof JobFailureError) throw err;
        if (runtime.exitStatus()?.signal === "SIGKILL")
          throw new JobFailureError(JobFailureCode.OUT_OF_MEMORY, "the runtime was killed during inference", true);
        throw new JobFailureError(JobFailureCode.INFERENCE_FAILED, `the probe inference failed: ${(err as Error).message}`, true);
      });
      const memory = await runtime.memory();
      const peakGpuMemoryBytes = await gpu.stop();
      keep = probe.keepLoaded;
      log.info(
        { runtimeId: runtime.id, loadMs: runtime.loadMs, ...measured, peakGpuMemoryBytes: Number(peakGpuMemoryBytes), kept: keep },
        "runtime probe answered",
      );
      return {
        result: {
          case: "runtimeProbe",
          value: {
            runtimeId: runtime.id,
            loadDuration: durationOf(runtime.loadMs),
            probeLatency: durationOf(measured.ttftMs),
            timeToFirstToken: durationOf(measured.ttftMs),
            processStarted: true,
            endpointHealthy: true,
            inferenceAnswered: true,
            tokensGenerated: measured.tokens,
            tokensPerSecond: measured.tokensPerSecond,
            peakRssBytes: BigInt(memory?.peakRssBytes ?? 0),
            peakGpuMemoryBytes,
          },
        },
      };
    } finally {
      await gpu.stop();
      // A runtime the lease asked to keep stays held for runtime.health.v1 and runtime.unload.v1.
      if (!keep) {
        await opts.supervisor
          .stop(runtime.id)
          .catch((err: unknown) => log.warn({ err: (err as Error).message }, "probe runtime did not stop cleanly"));
      }
    }
  };
}

/** How a runtime that an earlier agent process left behind was dealt with, for its health. */
export function orphanDetail(orphan: OrphanReport): string {
  const what = orphan.outcome === "stopped" ? "stopped by this agent at start" : "had already ended when this agent started";
  return `orphaned by an earlier agent process (pid ${orphan.record.pid}, started ${orphan.record.startedAt}): ${what}`;
}

export function runtimeHealthHandler(opts: RuntimeOptions): JobHandler {
  return async (spec): Promise<JobHandlerResult> => {
    if (spec.kind.case !== "runtimeHealth") throw new JobFailureError(JobFailureCode.INVALID_SPEC, "not a runtime health check", false);
    const orphan = opts.supervisor.orphan(spec.kind.value.runtimeId);
    if (orphan !== undefined) return { result: { case: "runtimeHealth", value: { healthy: false, detail: orphanDetail(orphan) } } };
    const health = await opts.supervisor.health(spec.kind.value.runtimeId).catch(typed);
    const detail = health.state === "exited" ? `exited (code ${health.exit.code}, signal ${health.exit.signal})` : health.state;
    return { result: { case: "runtimeHealth", value: { healthy: health.state === "healthy", detail } } };
  };
}

export function runtimeUnloadHandler(opts: RuntimeOptions): JobHandler {
  return async (spec): Promise<JobHandlerResult> => {
    if (spec.kind.case !== "runtimeUnload") throw new JobFailureError(JobFailureCode.INVALID_SPEC, "not a runtime unload", false);
    // An earlier agent's runtime was already stopped at start: the unload is done.
    if (opts.supervisor.orphan(spec.kind.value.runtimeId) !== undefined) return { result: { case: "runtimeUnload", value: {} } };
    const runtime = (() => {
      try {
        return opts.supervisor.get(spec.kind.value.runtimeId);
      } catch (err) {
        return typed(err);
      }
    })();
    const memory = await runtime.memory();
    await opts.supervisor.stop(runtime.id).catch(typed);
    return { result: { case: "runtimeUnload", value: { freedBytes: BigInt(memory?.rssBytes ?? 0) } } };
  };
}
