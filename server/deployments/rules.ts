// The deployment controller's rules, pure: given what the operator wants (desired state, revision
// and replicas) and what each instance (one replica slot of one revision, on a node or waiting to be
// placed) is doing, what happens next. Level triggered like a Kubernetes controller: the same inputs
// give the same plan, so a pass that runs twice, or on two replicas, plans the same thing and the
// conditional writes let one win.

export type Phase = "pending" | "loading" | "ready" | "draining" | "unloaded" | "failed";
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
  /** Its replica slot, 0 to replicas - 1 (higher when scaled down since). */
  replica: number;
  phase: Phase;
  step: Step | null;
  jobId: string | null;
  claimedAt: number | null;
  job?: JobOutcome;
  /** Times the slot was placed again after failing. */
  restarts?: number;
  /** It was ready once (it has a runtime id): a failure now is a lost runtime, worth placing again. */
  served?: boolean;
  /** Why its node can no longer serve it (offline, disabled, decommissioned); undefined when it can or it is not placed. */
  nodeLost?: string;
  /** The node is up and still holds the runtime (only its GPU is gone): it is told to stop it. */
  stopOnNode?: boolean;
}

export interface DeploymentView {
  desired: Desired;
  revision: bigint;
  /** Replicas wanted; 1 when unset. */
  replicas?: number;
  /**
   * Extra replicas wanted for a while (an agent rollout restarting the node of its only READY
   * one): placed like the others, drained as surplus once the surge ends. Never counted in READY.
   */
  surge?: number;
}

export type Action =
  | { kind: "create"; revision: bigint; replica: number }
  /** A pending replica is given a node (the controller asks the placement rules). */
  | { kind: "place"; revision: bigint; replica: number }
  | { kind: "start"; revision: bigint; replica: number; step: Step }
  | {
      kind: "move";
      revision: bigint;
      replica: number;
      to: Phase;
      step: Step | null;
      reason?: string;
      runtimeId?: string;
      /** Leaves its node: it waits to be placed again (counted as a restart when `restart`). */
      unplace?: boolean;
      restart?: boolean;
      /** Its node is told to stop the runtime it held (the node is up; the replica left it). */
      stopOnNode?: boolean;
    }
  | { kind: "remove" };

/** A failed job's failure (as stored) in one line: "NOT_FOUND: no such runtime". */
export function failureText(failure: { code?: string; message?: string } | null | undefined): string {
  return [failure?.code?.replace(/^JOB_FAILURE_CODE_/, ""), failure?.message].filter(Boolean).join(": ");
}

/** A claim without a job row after this long is taken to be lost (its replica died) and retried. */
export const CLAIM_GRACE_MS = 10_000;
/** A replica that served and then failed is placed again this many times before it stays failed. */
export const MAX_RESTARTS = 3;
export const MAX_REPLICAS = 64;

const terminal = (p: Phase) => p === "unloaded" || p === "failed";
const holds = (p: Phase) => p === "loading" || p === "ready" || p === "draining";
const move = (i: InstanceView, to: Phase, step: Step | null, reason?: string): Action => ({
  kind: "move",
  revision: i.revision,
  replica: i.replica,
  to,
  step,
  ...(reason !== undefined ? { reason } : {}),
});
const unplace = (i: InstanceView, reason: string, restart = false): Action => ({
  ...(move(i, "pending", null, reason) as Extract<Action, { kind: "move" }>),
  unplace: true,
  ...(restart ? { restart: true } : {}),
});
const start = (i: InstanceView, step: Step): Action => ({ kind: "start", revision: i.revision, replica: i.replica, step });

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

/** What the plan knows of the whole deployment while it looks at one instance. */
interface Context {
  d: DeploymentView;
  replicas: number;
  /** Ready replicas of the current revision, and of older ones. */
  currentReady: number;
  oldReady: number;
  /** Old ready instances to drain now: those beyond the wanted count (no gap in a rollout). */
  surplusOld: Set<InstanceView>;
  /** A replica of the current revision failed while an older one still serves: the rollout stops there. */
  rolloutStopped: boolean;
}

/** An instance whose node is gone: a wanted one waits for another node; anything else is over. */
function lostNode(c: Context, i: InstanceView): Action | undefined {
  if (i.nodeLost === undefined || !holds(i.phase)) return undefined;
  const wanted = c.d.desired === "serving" && i.revision === c.d.revision && i.replica < c.replicas && i.phase !== "draining";
  const stop = i.stopOnNode === true ? { stopOnNode: true } : {};
  if (wanted) return { ...unplace(i, `${i.nodeLost}: placing it again`), ...stop };
  return {
    ...move(i, "unloaded", null, `${i.nodeLost}: ${i.stopOnNode === true ? "stopping it there" : "nothing left to stop there"}`),
    ...stop,
  };
}

/** What an instance with no job in flight should do, given the desired state. */
function idle(c: Context, i: InstanceView): Action | undefined {
  const { d } = c;
  const stopNow = d.desired === "unloaded" || d.desired === "deleted";
  const current = i.revision === d.revision;
  const wanted = d.desired === "serving" && current && i.replica < c.replicas;
  switch (i.phase) {
    case "pending":
      return wanted
        ? { kind: "place", revision: i.revision, replica: i.replica }
        : move(i, "unloaded", null, "no longer wanted before it was placed");
    case "failed":
      // A replica that served and lost its runtime is placed again, a few times; a revision that
      // never loaded stays failed (its model or profile is at fault, not the node).
      if (wanted && i.served === true && (i.restarts ?? 0) < MAX_RESTARTS && !c.rolloutStopped)
        return unplace(i, "its runtime failed after serving: placing it again", true);
      return undefined;
    case "unloaded":
      return wanted ? unplace(i, "wanted again") : undefined;
    case "loading": {
      // Loading with no job in flight means no load job ran: nothing holds memory on the node.
      if (d.desired !== "serving") return move(i, "unloaded", null, `${d.desired} before it loaded`);
      if (!current) {
        // A superseded revision still loads while the replicas serving are fewer than wanted (its
        // agent restarted mid-rollout, or the new revision failed): it is what serves.
        if (c.currentReady + c.oldReady >= c.replicas)
          return move(i, "unloaded", null, `superseded by revision ${d.revision} before it loaded`);
      } else if (i.replica >= c.replicas) return move(i, "unloaded", null, "scaled down before it loaded");
      return i.step !== null ? start(i, i.step) : undefined;
    }
    case "ready":
      if (stopNow) return move(i, "draining", "unload", `${d.desired} by operator`);
      if (d.desired === "drained") return move(i, "draining", "drain", "drained by operator");
      if (current && i.replica >= c.replicas) return move(i, "draining", "drain", `scaled to ${c.replicas}`);
      // No gap: an old replica serves until a new one is ready in its place.
      if (c.surplusOld.has(i)) return move(i, "draining", "drain", `revision ${d.revision} is ready in its place`);
      return undefined;
    case "draining":
      if (stopNow && i.step === "drain") return move(i, "draining", "unload", `${d.desired} by operator`);
      return i.step !== null ? start(i, i.step) : move(i, "unloaded", null);
  }
}

function contextOf(d: DeploymentView, instances: InstanceView[]): Context {
  const replicas = d.desired === "serving" ? (d.replicas ?? 1) + (d.surge ?? 0) : 0;
  const live = (i: InstanceView) => i.phase === "ready" && i.nodeLost === undefined;
  const current = instances.filter((i) => i.revision === d.revision && i.replica < replicas);
  const old = instances.filter((i) => i.revision < d.revision && live(i));
  const currentReady = current.filter(live).length;
  // Oldest revision first, highest slot first: which old replicas go is always the same.
  const order = [...old].sort((a, b) => (a.revision !== b.revision ? (a.revision < b.revision ? -1 : 1) : b.replica - a.replica));
  const surplus = Math.max(0, currentReady + old.length - replicas);
  return {
    d,
    replicas,
    currentReady,
    oldReady: old.length,
    surplusOld: new Set(order.slice(0, surplus)),
    rolloutStopped: old.length > 0 && current.some((i) => i.phase === "failed"),
  };
}

/** Slots of the current revision to create: all at once, or one at a time while an old revision serves (surge one). */
function toCreate(c: Context, instances: InstanceView[]): number[] {
  if (c.d.desired !== "serving" || c.rolloutStopped) return [];
  const current = instances.filter((i) => i.revision === c.d.revision);
  const missing: number[] = [];
  for (let slot = 0; slot < c.replicas; slot++) if (!current.some((i) => i.replica === slot)) missing.push(slot);
  if (c.oldReady === 0) return missing;
  const settling = current.some((i) => i.replica < c.replicas && i.phase !== "ready");
  return settling ? [] : missing.slice(0, 1);
}

/** The actions of one pass over a deployment: at most one per instance, plus creates or remove. */
export function plan(d: DeploymentView, instances: InstanceView[], now: number): Action[] {
  const c = contextOf(d, instances);
  const actions: Action[] = [];
  for (const i of instances) {
    const action = lostNode(c, i) ?? (i.jobId !== null ? afterJob(i, i.job ?? { state: "missing" }, now) : idle(c, i));
    if (action !== undefined) actions.push(action);
  }
  for (const replica of toCreate(c, instances)) actions.push({ kind: "create", revision: d.revision, replica });
  if (d.desired === "deleted" && instances.every((i) => terminal(i.phase) && i.jobId === null)) actions.push({ kind: "remove" });
  return actions;
}

/** The order replicas are listed and routed in: the newest revision first, then by slot. */
export function newestRevisionFirst(a: { revision: bigint; replica: number }, b: { revision: bigint; replica: number }): number {
  return a.revision !== b.revision ? (a.revision > b.revision ? -1 : 1) : a.replica - b.replica;
}

/** The deployment's overall state, shown to operators and used for typed invoke errors. */
export type OverallPhase = Phase | "degraded";

export function overallPhase(d: DeploymentView, instances: Pick<InstanceView, "revision" | "replica" | "phase">[]): OverallPhase {
  const replicas = d.desired === "serving" ? (d.replicas ?? 1) : 0;
  const ready = instances.filter((i) => i.phase === "ready").length;
  if (replicas > 0 && ready >= replicas) return "ready";
  if (replicas > 0 && ready > 0) return "degraded";
  if (instances.some((i) => i.phase === "draining" || i.phase === "ready")) return "draining";
  if (instances.some((i) => i.phase === "loading")) return "loading";
  if (replicas === 0) {
    // Drained, unloaded or scaled to zero: what the current revision came to.
    const current = instances.filter((i) => i.revision === d.revision);
    return current.length > 0 && current.every((i) => i.phase === "failed") ? "failed" : "unloaded";
  }
  const current = instances.filter((i) => i.revision === d.revision && i.replica < replicas);
  if (current.length < replicas || current.some((i) => i.phase === "pending" || i.phase === "unloaded")) return "pending";
  return "failed";
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
