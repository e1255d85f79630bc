// The deployment controller's rules, pure: given what the operator wants (desired state and
// revision) and what each instance (one revision on the node) is doing, what happens next. Level
// triggered like a Kubernetes controller: the same inputs give the same plan, so a pass that
// runs twice, or on two replicas, plans the same thing and the conditional writes let one win.

export type Phase = "loading" | "ready" | "draining" | "unloaded" | "failed";
export type Step = "acquire" | "load" | "drain" | "unload";
export type Desired = "serving" | "drained" | "unloaded" | "deleted";

/** What became of the job of an instance's step. */
export type JobOutcome =
  | { state: "pending" | "leased" }
  | { state: "succeeded"; runtimeId?: string }
  | { state: "failed" | "cancelled"; reason: string }
  /** Claimed but no job row (yet, or the claiming replica died before creating it). */
  | { state: "missing" };

export interface InstanceView {
  revision: bigint;
  phase: Phase;
  step: Step | null;
  jobId: string | null;
  claimedAt: number | null;
  job?: JobOutcome;
}

export interface DeploymentView {
  desired: Desired;
  revision: bigint;
}

export type Action =
  | { kind: "create"; revision: bigint }
  | { kind: "start"; revision: bigint; step: Step }
  | { kind: "move"; revision: bigint; to: Phase; step: Step | null; reason?: string; runtimeId?: string }
  | { kind: "remove" };

/** A failed job's failure (as stored) in one line: "NOT_FOUND: no such runtime". */
export function failureText(failure: { code?: string; message?: string } | null | undefined): string {
  return [failure?.code?.replace(/^JOB_FAILURE_CODE_/, ""), failure?.message].filter(Boolean).join(": ");
}

/** A claim without a job row after this long is taken to be lost (its replica died) and retried. */
export const CLAIM_GRACE_MS = 10_000;

const terminal = (p: Phase) => p === "unloaded" || p === "failed";
const move = (i: InstanceView, to: Phase, step: Step | null, reason?: string): Action => ({
  kind: "move",
  revision: i.revision,
  to,
  step,
  ...(reason !== undefined ? { reason } : {}),
});

/** Where a finished step leads. */
function afterJob(i: InstanceView, job: JobOutcome, now: number): Action | undefined {
  switch (job.state) {
    case "pending":
    case "leased":
      return undefined;
    case "missing":
      return i.claimedAt !== null && now - i.claimedAt >= CLAIM_GRACE_MS ? move(i, i.phase, i.step, "job lost; retrying") : undefined;
    case "succeeded":
      switch (i.step) {
        case "acquire":
          return move(i, "loading", "load");
        case "load":
          return { ...move(i, "ready", null), ...(job.runtimeId ? { runtimeId: job.runtimeId } : {}) };
        case "drain":
          return move(i, "draining", "unload");
        case "unload":
        case null:
          return move(i, "unloaded", null);
      }
      return undefined;
    case "failed":
    case "cancelled":
      switch (i.step) {
        case "acquire":
        case "load":
        case null:
          return move(i, "failed", null, `${i.step ?? "step"} failed: ${job.reason}`);
        case "drain":
          // The runtime still holds memory: unload it anyway.
          return move(i, "draining", "unload", `drain failed: ${job.reason}`);
        case "unload":
          // The agent no longer holds it (restarted, or it was never loaded): nothing runs.
          return move(i, "unloaded", null, `unload failed: ${job.reason}`);
      }
  }
}

/** What an instance with no job in flight should do, given the desired state. */
function idle(d: DeploymentView, i: InstanceView, current: InstanceView | undefined): Action | undefined {
  const stopNow = d.desired === "unloaded" || d.desired === "deleted";
  const superseded = i.revision < d.revision;
  if (terminal(i.phase)) return undefined;
  if (i.phase === "loading") {
    // Loading with no job in flight means no load job ran: nothing holds memory on the node.
    if (d.desired !== "serving") return move(i, "unloaded", null, `${d.desired} before it loaded`);
    // A superseded revision is not worth loading, unless the current one failed: then this one is
    // what serves (e.g. its agent restarted while the new revision was failing).
    if (superseded && current?.phase !== "failed")
      return move(i, "unloaded", null, `superseded by revision ${d.revision} before it loaded`);
    return i.step !== null ? { kind: "start", revision: i.revision, step: i.step } : undefined;
  }
  if (i.phase === "ready") {
    if (stopNow) return move(i, "draining", "unload", `${d.desired} by operator`);
    if (d.desired === "drained") return move(i, "draining", "drain", "drained by operator");
    // No gap: the old revision serves until the new one is ready.
    if (superseded && current?.phase === "ready") return move(i, "draining", "drain", `revision ${d.revision} is ready`);
    return undefined;
  }
  // draining
  if (stopNow && i.step === "drain") return move(i, "draining", "unload", `${d.desired} by operator`);
  return i.step !== null ? { kind: "start", revision: i.revision, step: i.step } : move(i, "unloaded", null);
}

/** The actions of one pass over a deployment: at most one per instance, plus create or remove. */
export function plan(d: DeploymentView, instances: InstanceView[], now: number): Action[] {
  const current = instances.find((i) => i.revision === d.revision);
  const actions: Action[] = [];
  for (const i of instances) {
    const action = i.jobId !== null ? afterJob(i, i.job ?? { state: "missing" }, now) : idle(d, i, current);
    if (action !== undefined) actions.push(action);
  }
  if (d.desired === "serving" && current === undefined) actions.push({ kind: "create", revision: d.revision });
  if (d.desired === "deleted" && instances.every((i) => terminal(i.phase) && i.jobId === null)) actions.push({ kind: "remove" });
  return actions;
}

/** The deployment's overall state, shown to operators and used for typed invoke errors. */
export function overallPhase(d: DeploymentView, instances: Pick<InstanceView, "revision" | "phase">[]): Phase {
  if (d.desired === "serving" && instances.some((i) => i.phase === "ready")) return "ready";
  if (instances.some((i) => i.phase === "draining" || (i.phase === "ready" && d.desired !== "serving"))) return "draining";
  const current = instances.find((i) => i.revision === d.revision) ?? [...instances].sort((a, b) => Number(b.revision - a.revision))[0];
  if (current !== undefined) return current.phase;
  return d.desired === "serving" ? "loading" : "unloaded";
}

const NAME = /^[a-z][a-z0-9-]{0,62}$/;

export function checkDeploymentName(name: string): string | undefined {
  return NAME.test(name) ? undefined : "must be 1 to 63 characters of a-z, 0-9 and '-', starting with a letter";
}

export const MAX_IN_FLIGHT = 1024;
export const DEFAULT_MAX_IN_FLIGHT = 8;
export const MAX_TIMEOUT_MS = 3_600_000;
export const DEFAULT_INVOKE_TIMEOUT_MS = 60_000;
export const DEFAULT_DRAIN_TIMEOUT_MS = 30_000;
