// Runs the leases the server pushes down the Session (the agent's `SessionJobs`).
//
// For each lease: a destructive job with a receipt re-sends the recorded outcome; a kind with no
// handler fails at once (UNSUPPORTED_CAPABILITY, not retryable), and so does a lease naming a path
// outside the artifact path grammar of common/paths.ts (PATH_REJECTED); otherwise the handler runs while
// the lease is renewed by progress at least every third of its duration. The work stops when the
// server says the lease is lost (aborted, "lease lost: stop work"), when a cancel arrives (on the
// stream or in a progress reply; then the job is reported CANCELLED), or when the agent shuts
// down. A lease for a job+attempt already running only moves its reporting to the session the
// lease came on (the server re-sends leases after a reconnect); a newer attempt of a running job
// supersedes it.
//
// Reports that cannot be delivered (the session is down) are retried on whichever session the
// job's lease last arrived on, until the server answers: accepted, or refused. A server that
// answers but cannot decide now (`unavailable` during a database outage, `internal`) is asked
// again, about once a second, while the work goes on: only an answer that the lease is gone
// (`refusalVerdict`), or the lease's own expiry passing meanwhile, stops the work.
import { create } from "@bufbuild/protobuf";
import type { Logger } from "pino";
import type { JobCancel } from "../../gen/proto/modelforge/agent/v1/agent_pb.js";
import {
  JobFailureCode,
  JobProgressSchema,
  JobResultSchema,
  type JobLease,
  type JobProgress,
  type JobSpec,
} from "../../gen/proto/modelforge/jobs/v1/jobs_pb.js";
import type { ReplyResult, SessionLink } from "../session/link.js";
import type { SessionJobs } from "../session/options.js";
import { jobSpecPathProblem } from "../../common/paths.js";
import { type CapabilityRegistry, isDestructive, type JobAttempt, type JobHandler, type ProgressUpdate } from "./registry.js";
import type { ReceiptStore } from "./receipts.js";
import {
  capabilityOfLease,
  checkedResult,
  failureOutcome,
  finishedWork,
  outcomeOfReceipt,
  receiptOf,
  thrownOutcome,
  truncate,
  unsupportedMessage,
  type Outcome,
} from "./outcome.js";
import { systemClock, type Clock } from "../../common/clock.js";
import { Run } from "./run.js";
import type { JobRunMetrics } from "../metrics.js";

/** Why a handler's signal was aborted. */
export class LeaseLost extends Error {
  override name = "LeaseLost";
}
export class JobCancelled extends Error {
  override name = "JobCancelled";
}
export class AgentStopping extends Error {
  override name = "AgentStopping";
}

/** What a renewal or progress came to (see JobRunner.sendProgress). */
type ProgressVerdict = "ok" | "lost" | "refused" | "unsent" | "retry";

/** A lease this agent can run: its capability's handler and its spec. */
interface Admitted {
  kind: "run";
  capability: string;
  handler: JobHandler;
  spec: JobSpec;
}

export interface JobRunnerOptions {
  registry: CapabilityRegistry;
  /** Receipts of destructive jobs; without it, destructive jobs get no replay protection. */
  receipts?: ReceiptStore;
  log: Logger;
  /** Aborting stops every running job without reporting (their leases lapse or are re-queued). */
  signal?: AbortSignal;
  /** Delay between attempts to deliver a report while the session is down (default 250 ms). */
  retryDelayMs?: number;
  /** Delay before asking again after a server answered "not now" (unavailable; default 1 s). */
  unavailableRetryMs?: number;
  metrics?: JobRunMetrics | undefined;
  /** The time renewals, retries and receipts go by (default: the system clock; tests drive a manual one). */
  clock?: Clock;
}

/**
 * What a refused progress, completion or failure means for the work, by the server's code:
 * "lost", the lease is not ours any more (stop, report nothing); "refused", this report is wrong
 * (invalid_argument); "retry", the server could not decide now (unavailable, internal, and any
 * code this agent does not know), so ask again.
 */
export function refusalVerdict(code: string): "lost" | "refused" | "retry" {
  switch (code) {
    case "aborted":
    case "not_found":
    case "permission_denied":
    case "failed_precondition":
      return "lost";
    case "invalid_argument":
      return "refused";
    default:
      return "retry";
  }
}

/** Handler progress is sent at most this often; in between only the latest is kept. */
const PROGRESS_MIN_INTERVAL_MS = 100;
/** The shortest wait between renewals, whatever the lease. */
const MIN_RENEWAL_WAIT_MS = 20;

export class JobRunner implements SessionJobs {
  private readonly runs = new Map<string, Run>();
  private readonly registry: CapabilityRegistry;
  private readonly log: Logger;
  private readonly retryDelayMs: number;
  private readonly unavailableRetryMs: number;
  private readonly clock: Clock;

  constructor(private readonly opts: JobRunnerOptions) {
    this.registry = opts.registry;
    this.clock = opts.clock ?? systemClock;
    this.log = opts.log;
    this.retryDelayMs = opts.retryDelayMs ?? 250;
    this.unavailableRetryMs = opts.unavailableRetryMs ?? 1_000;
    opts.signal?.addEventListener("abort", () => this.stopAll(), { once: true });
  }

  capabilities(): string[] {
    return this.registry.names();
  }

  engines(): string[] {
    return [...this.registry.engines];
  }

  embeddingEngines(): string[] {
    return [...this.registry.embeddingEngines];
  }

  runningJobIds(): string[] {
    return [...this.runs.keys()];
  }

  /** Resolves when no job is running (for tests and orderly shutdown). */
  async idle(): Promise<void> {
    while (this.runs.size > 0) await Promise.all([...this.runs.values()].map((r) => r.finished));
  }

  stopAll(): void {
    for (const run of this.runs.values()) run.stop("stopping", new AgentStopping("agent stopping"));
  }

  onLease(lease: JobLease, link: SessionLink): void {
    if (this.opts.signal?.aborted) return;
    const current = this.runs.get(lease.jobId);
    if (current !== undefined) {
      if (lease.attempt === current.attempt) {
        // The same lease again, typically re-sent after a reconnect: continue, report here.
        current.resent(lease, link, this.clock.now());
        this.log.debug({ jobId: lease.jobId, attempt: lease.attempt }, "lease re-sent; continuing");
        return;
      }
      if (lease.attempt < current.attempt) {
        this.log.warn({ jobId: lease.jobId, attempt: lease.attempt, running: current.attempt }, "stale lease ignored");
        return;
      }
      this.log.warn(
        { jobId: lease.jobId, attempt: current.attempt, next: lease.attempt },
        "lease lost: stop work (superseded by a newer attempt)",
      );
      current.stop("lost", new LeaseLost(`superseded by attempt ${lease.attempt}`));
    }
    const run = new Run(lease, link, this.clock.now());
    this.runs.set(lease.jobId, run);
    this.execute(run, current?.finished)
      .catch((err: unknown) => this.log.error({ jobId: run.jobId, attempt: run.attempt, error: (err as Error).message }, "job run failed"))
      .finally(() => {
        if (this.runs.get(run.jobId) === run) this.runs.delete(run.jobId);
        run.finish();
      });
  }

  onCancel(cancel: JobCancel): void {
    const run = this.runs.get(cancel.jobId);
    if (run === undefined) return;
    if (cancel.attempt !== 0 && cancel.attempt < run.attempt) return; // for an attempt we no longer run
    if (cancel.leaseLost) {
      // The server's reconciliation after a reconnect: the job is no longer ours to report on.
      this.log.warn({ jobId: run.jobId, attempt: run.attempt, reason: cancel.reason }, "lease lost: stop work");
      run.stop("lost", new LeaseLost(cancel.reason));
      return;
    }
    this.log.info({ jobId: run.jobId, attempt: run.attempt, reason: cancel.reason }, "job cancel received");
    this.requestCancel(run, cancel.reason);
  }

  private requestCancel(run: Run, reason: string): void {
    if (run.cancelRequested) return;
    run.cancelRequested = true;
    run.cancelReason = reason || "cancelled by operator";
    run.stop("cancelled", new JobCancelled(run.cancelReason));
  }

  /** One attempt: replay a receipt, or refuse the lease, or run it; then keep a receipt and report. */
  private async execute(run: Run, previous: Promise<void> | undefined): Promise<void> {
    if (previous !== undefined) await previous; // a superseded attempt unwinds first
    const log = this.log.child({ jobId: run.jobId, attempt: run.attempt });
    const receipt = this.opts.receipts?.get(run.jobId);
    if (receipt !== undefined) {
      log.info(
        { capability: receipt.capability, recordedAttempt: receipt.attempt },
        "replayed lease: re-sending the recorded outcome without running the job again",
      );
      return this.report(run, outcomeOfReceipt(receipt), log);
    }
    const admitted = this.admit(run.lease, log);
    if (admitted.kind !== "run") return this.report(run, admitted, log);
    const { capability } = admitted;
    log.info({ capability }, "job started");
    const outcome = await this.work(run, admitted, log);
    const stopped = run.stopped === "lost" || run.stopped === "stopping" ? run.stopped : undefined;
    this.opts.metrics?.jobRun(capability, stopped !== undefined ? { kind: "stopped", reason: stopped } : outcome);
    if (stopped !== undefined) {
      log.info({ reason: stopped }, stopped === "lost" ? "lease lost: work stopped, nothing reported" : "work stopped: agent stopping");
      return;
    }
    await this.keepReceipt(run, capability, outcome, log);
    await this.report(run, outcome, log);
  }

  /** The handler that runs the lease, or the failure to report for a lease this agent cannot run. */
  private admit(lease: JobLease, log: Logger): Admitted | Outcome {
    const capability = capabilityOfLease(lease);
    const handler = capability === undefined ? undefined : this.registry.get(capability);
    if (handler === undefined || capability === undefined || lease.spec === undefined) {
      log.warn({ capability }, "unsupported capability: failing the job");
      const message = unsupportedMessage(capability, lease.spec, this.registry.names());
      return failureOutcome(JobFailureCode.UNSUPPORTED_CAPABILITY, message, false);
    }
    // The server checked the paths against the contract's grammar; the agent does not take that on
    // trust before anything touches its file system.
    const pathProblem = jobSpecPathProblem(lease.spec);
    if (pathProblem !== undefined) {
      log.warn({ capability }, "lease names a path outside the artifact path grammar: failing the job");
      return failureOutcome(JobFailureCode.PATH_REJECTED, truncate(pathProblem), false);
    }
    return { kind: "run", capability, handler, spec: lease.spec };
  }

  /** Runs the handler while the lease is renewed; resolves with what it came to. */
  private async work(run: Run, { capability, handler, spec }: Admitted, log: Logger): Promise<Outcome> {
    const stopRenewing = this.renewWhileRunning(run, log);
    try {
      return checkedResult(capability, create(JobResultSchema, await handler(spec, this.contextOf(run, log))));
    } catch (err) {
      return thrownOutcome(err, run.stopped === "cancelled" ? run.cancelReason : undefined);
    } finally {
      stopRenewing();
    }
  }

  /** Records a destructive job's finished work, so a replayed lease does not run it again. */
  private async keepReceipt(run: Run, capability: string, outcome: Outcome, log: Logger): Promise<void> {
    const receipts = this.opts.receipts;
    if (receipts === undefined || !isDestructive(capability) || !finishedWork(outcome)) return;
    await receipts
      .record(receiptOf(run.jobId, capability, run.attempt, outcome, this.clock.now()))
      // Still report: once the server has the outcome, no replay will come.
      .catch((err: unknown) => log.error({ error: (err as Error).message }, "job receipt could not be written"));
  }

  private contextOf(run: Run, log: Logger): JobAttempt {
    let lastSent = 0;
    return {
      jobId: run.jobId,
      attempt: run.attempt,
      signal: run.controller.signal,
      progress: async (update: ProgressUpdate) => {
        if (run.stopped === "lost") throw new LeaseLost("lease lost: stop work");
        const progress = create(JobProgressSchema, update);
        const now = this.clock.now();
        if (now - lastSent < PROGRESS_MIN_INTERVAL_MS) return { cancelRequested: run.cancelRequested };
        lastSent = now;
        const reply = await this.sendProgress(run, progress, log);
        if (reply === "refused") throw new Error("progress refused by the server (see the agent log)");
        if (reply === "lost") throw new LeaseLost("lease lost: stop work");
        return { cancelRequested: run.cancelRequested };
      },
    };
  }

  /** Renews the lease while the handler runs, at least every third of the lease; returns what stops it. */
  private renewWhileRunning(run: Run, log: Logger): () => void {
    const stop = new AbortController();
    void this.renewals(run, log, stop.signal);
    return () => stop.abort();
  }

  private async renewals(run: Run, log: Logger, stopped: AbortSignal): Promise<void> {
    let wait = run.leaseMs / 3;
    for (;;) {
      await this.clock.sleep(Math.max(MIN_RENEWAL_WAIT_MS, wait), stopped);
      if (stopped.aborted) return;
      const interval = Math.max(MIN_RENEWAL_WAIT_MS, run.leaseMs / 3);
      const due = this.clock.now() - run.lastContact >= interval - 5;
      const outcome = due ? await this.sendProgress(run, undefined, log) : undefined;
      if (stopped.aborted) return;
      wait = this.nextRenewalIn(run, interval, outcome);
    }
  }

  /**
   * Session down: try again shortly (the lease may come back on a new session). Server unable to
   * answer now: ask again at a steady pace while the lease lasts. Otherwise a third of the lease
   * after the server last heard of it.
   */
  private nextRenewalIn(run: Run, interval: number, outcome: ProgressVerdict | undefined): number {
    if (outcome === "unsent") return this.retryDelayMs;
    if (outcome === "retry") return Math.min(this.unavailableRetryMs, interval);
    return interval - (this.clock.now() - run.lastContact);
  }

  /**
   * Sends progress (none: a pure renewal). "ok": renewed; "lost": the lease is gone and the work
   * was stopped; "refused": the server refused this progress; "unsent": the session is down;
   * "retry": the server could not answer now.
   */
  private async sendProgress(run: Run, progress: JobProgress | undefined, log: Logger): Promise<ProgressVerdict> {
    let reply: ReplyResult;
    try {
      reply = await run.link.send({
        case: "jobProgress",
        value: { jobId: run.jobId, attempt: run.attempt, ...(progress !== undefined ? { progress } : {}) },
      });
    } catch {
      return "unsent";
    }
    if (reply.case === "jobProgress") {
      run.renewed(this.clock.now(), reply.value.expiresAt);
      if (reply.value.cancelRequested) this.requestCancel(run, run.cancelReason || "cancel requested by operator");
      return "ok";
    }
    if (reply.case === "error") {
      const { code, message } = reply.value;
      const verdict = refusalVerdict(code);
      if (verdict === "refused") {
        log.warn({ code, reason: message }, "progress refused");
        return "refused";
      }
      if (verdict === "retry") {
        if (!run.leaseEnded(this.clock.now())) {
          log.debug({ code, reason: message }, "progress not accepted now; will renew again");
          return "retry";
        }
        log.warn({ code, reason: message }, "lease lost: stop work (it expired while the server could not renew it)");
        run.stop("lost", new LeaseLost("lease expired"));
        return "lost";
      }
      log.warn({ code, reason: message }, "lease lost: stop work");
      run.stop("lost", new LeaseLost(message));
      return "lost";
    }
    return "unsent";
  }

  /**
   * Delivers the outcome; retries while the session is down or the server cannot answer now,
   * until it is accepted, refused, or the lease has ended.
   */
  private async report(run: Run, outcome: Outcome, log: Logger): Promise<void> {
    for (;;) {
      if (run.stopped === "stopping" || run.stopped === "lost") return;
      let reply: ReplyResult | undefined;
      try {
        reply =
          outcome.kind === "result"
            ? await run.link.send({ case: "jobComplete", value: { jobId: run.jobId, attempt: run.attempt, result: outcome.result } })
            : await run.link.send({ case: "jobFail", value: { jobId: run.jobId, attempt: run.attempt, failure: outcome.failure } });
      } catch {
        reply = undefined;
      }
      if (reply !== undefined && reply.case !== "error") {
        if (outcome.kind === "result") log.info("job completed");
        else log.info({ code: JobFailureCode[outcome.failure.code], retryable: outcome.failure.retryable }, "job failed");
        return;
      }
      if (reply?.case === "error") {
        const { code, message } = reply.value;
        if (refusalVerdict(code) !== "retry") {
          log.warn({ code, reason: message }, code === "aborted" ? "lease lost: outcome not accepted" : "outcome refused");
          return;
        }
        if (run.leaseEnded(this.clock.now())) {
          log.warn({ code, reason: message }, "lease lost: outcome not delivered before the lease expired");
          return;
        }
        log.debug({ code, reason: message }, "outcome not accepted now; will send it again");
      }
      await this.clock.sleep(reply === undefined ? this.retryDelayMs : this.unavailableRetryMs, this.opts.signal);
    }
  }
}
