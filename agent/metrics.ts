// The agent's Prometheus metrics, served on loopback when MODELFORGE_AGENT_METRICS_ADDRESS is set:
// jobs run by capability and outcome, bytes artifact jobs wrote, Session reconnects, plus Node's
// process metrics. One Registry per agent, handed to the runner and the session loop as the narrow
// interfaces below. Label values come from closed sets only.
import { Counter, Registry, collectDefaultMetrics } from "prom-client";
import type { Code } from "@connectrpc/connect";
import { JobFailureCode, type JobFailure, type JobResult } from "../gen/proto/modelforge/jobs/v1/jobs_pb.js";
import { isKnownCapability } from "../common/capabilities.js";
import { codeName } from "../common/codes.js";

/** How a job the agent ran ended. */
export type JobRunOutcome =
  | { kind: "result"; result: JobResult }
  | { kind: "failure"; failure: JobFailure }
  | { kind: "stopped"; reason: "lost" | "stopping" };

/** What the job runner counts (./jobs/runner.ts). */
export interface JobRunMetrics {
  jobRun(capability: string, outcome: JobRunOutcome): void;
}

/** What the session loop counts (./session/run.ts). */
export interface SessionLoopMetrics {
  /**
   * A session ended and the agent dials again: "renewed" (a new certificate), "ended" (the server
   * closed it cleanly) or the status it failed with.
   */
  reconnecting(reason: Code | "renewed" | "ended"): void;
}

/**
 * The outcome label: "succeeded", the failure code's name in lower case (a closed enum of the
 * contract), "lease_lost" or "stopped".
 */
export function jobOutcomeLabel(outcome: JobRunOutcome): string {
  switch (outcome.kind) {
    case "result":
      return "succeeded";
    case "failure":
      return (JobFailureCode[outcome.failure.code] ?? "UNSPECIFIED").toLowerCase();
    case "stopped":
      return outcome.reason === "lost" ? "lease_lost" : "stopped";
  }
}

export class AgentMetrics implements JobRunMetrics, SessionLoopMetrics {
  readonly registry = new Registry();
  private readonly jobs: Counter<"capability" | "outcome">;
  private readonly bytes: Counter;
  private readonly reconnects: Counter<"reason">;

  constructor() {
    const registers = [this.registry];
    collectDefaultMetrics({ register: this.registry });
    this.jobs = new Counter({
      name: "modelforge_agent_jobs_total",
      help: "Jobs this agent ran, by capability and outcome.",
      labelNames: ["capability", "outcome"] as const,
      registers,
    });
    this.bytes = new Counter({
      name: "modelforge_agent_artifact_bytes_total",
      help: "Bytes artifact.acquire.v1 jobs wrote (verified files; bytes already present are not counted).",
      registers,
    });
    this.reconnects = new Counter({
      name: "modelforge_agent_reconnects_total",
      help: 'Sessions that ended and were dialled again, by reason: "renewed", "ended" or the status the session failed with.',
      labelNames: ["reason"] as const,
      registers,
    });
  }

  jobRun(capability: string, outcome: JobRunOutcome): void {
    this.jobs.inc({ capability: isKnownCapability(capability) ? capability : "unknown", outcome: jobOutcomeLabel(outcome) });
    if (outcome.kind === "result" && outcome.result.result.case === "artifactAcquire") {
      this.bytes.inc(Number(outcome.result.result.value.bytesWritten));
    }
  }

  reconnecting(reason: Code | "renewed" | "ended"): void {
    this.reconnects.inc({ reason: typeof reason === "string" ? reason : codeName(reason) });
  }
}
