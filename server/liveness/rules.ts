// Node liveness, in the manner of Kubernetes' node lifecycle controller.
//
// Pure: every instant is a parameter (epoch milliseconds), and every heartbeat instant is the
// SERVER's receive time, never the agent's own clock, so a node with a broken clock can neither
// keep itself online nor knock itself offline.

export type Liveness = "pending" | "online" | "stale" | "offline" | "disabled" | "decommissioned";

export interface LivenessThresholds {
  /** A node is online while its last heartbeat is at most this old (default 30 s). */
  staleAfterMs: number;
  /** ...stale while at most this old (default 90 s), offline after that. */
  offlineAfterMs: number;
}

export interface LivenessInput {
  /** Server-received time of the last heartbeat; null if the node has never been heard from. */
  lastHeartbeatAt: number | null;
  disabled: boolean;
  decommissioned: boolean;
}

/** The audit actions the liveness reconciler may record. */
export type LivenessAction = "node.online" | "node.stale" | "node.offline";

export interface LivenessTransition {
  /** Whether the reconciler should store `next`. */
  changed: boolean;
  /** Whether the change deserves an audit record (`action` is then set). */
  audit: boolean;
  action?: LivenessAction;
}

function checkThresholds({ staleAfterMs, offlineAfterMs }: LivenessThresholds): void {
  // A misconfiguration here would silently invert the state machine; fail loudly instead.
  if (!(staleAfterMs >= 0) || !(offlineAfterMs >= staleAfterMs)) {
    throw new RangeError(`liveness thresholds must satisfy 0 <= staleAfterMs <= offlineAfterMs, got ${staleAfterMs} and ${offlineAfterMs}`);
  }
}

// Replicas' clocks differ slightly, so a heartbeat stamped by another replica can look like it
// arrived in the future; that node has just been heard from, so its age is zero.
function ageOf(lastHeartbeatAt: number, now: number): number {
  return Math.max(0, now - lastHeartbeatAt);
}

function timeLiveness(lastHeartbeatAt: number | null, now: number, t: LivenessThresholds): Liveness {
  if (lastHeartbeatAt === null) return "pending";
  const age = ageOf(lastHeartbeatAt, now);
  if (age <= t.staleAfterMs) return "online";
  if (age <= t.offlineAfterMs) return "stale";
  return "offline";
}

/**
 * The node's liveness at `now`. Operator states override time: decommissioned (terminal) over
 * disabled over the heartbeat age. Boundaries are inclusive: exactly `staleAfterMs` old is still
 * online, exactly `offlineAfterMs` old is still stale.
 */
export function computeLiveness(input: LivenessInput, now: number, thresholds: LivenessThresholds): Liveness {
  checkThresholds(thresholds);
  if (input.decommissioned) return "decommissioned";
  if (input.disabled) return "disabled";
  return timeLiveness(input.lastHeartbeatAt, now, thresholds);
}

/**
 * What the liveness reconciler (the sweeper) should record when a node's stored liveness is
 * `previous` and its computed liveness is `next`.
 *
 * Transitions into or out of 'disabled' and 'decommissioned' are made by operator actions
 * (disable, enable, decommission), which write the new liveness themselves and are audited there.
 * The reconciler therefore never produces them: any pair involving those states yields
 * `{ changed: false, audit: false }`, so a sweep racing an operator action cannot undo or
 * double-audit it.
 */
export function livenessTransition(previous: Liveness, next: Liveness): LivenessTransition {
  const unchanged = { changed: false, audit: false };
  if (previous === next || previous === "disabled" || previous === "decommissioned") return unchanged;
  switch (next) {
    case "online": // covers first contact (from pending) as well as recovery from stale/offline
    case "stale":
    case "offline":
      return { changed: true, audit: true, action: `node.${next}` };
    case "pending":
      // A node cannot become unheard-from again; store it if asked, but there is nothing to audit.
      return { changed: true, audit: false };
    default: // 'disabled' | 'decommissioned': the operator action records these
      return unchanged;
  }
}

/**
 * The first instant at which the time-based liveness will differ from its value at `now` if no
 * heartbeat arrives, for scheduling the next sweep of this node; null if it never will (offline,
 * or never heard from). It is one millisecond past the inclusive boundary, so a scheduler waking
 * exactly then sees the new state rather than spinning on the old one.
 *
 * Only the heartbeat is considered: callers do not schedule disabled or decommissioned nodes.
 */
export function nextLivenessDeadline(lastHeartbeatAt: number | null, now: number, thresholds: LivenessThresholds): number | null {
  checkThresholds(thresholds);
  switch (timeLiveness(lastHeartbeatAt, now, thresholds)) {
    case "online":
      return lastHeartbeatAt! + thresholds.staleAfterMs + 1;
    case "stale":
      return lastHeartbeatAt! + thresholds.offlineAfterMs + 1;
    default:
      return null;
  }
}

/**
 * Whether work on this node is due for reclaim (marked failed, never restarted elsewhere): the
 * node has been unreachable for longer than the offline threshold plus a grace period, which gives
 * a brief network blip the chance to recover first.
 *
 * A node never heard from (`lastHeartbeatAt` null) is not reclaimable by this rule: there is no
 * instant from which to measure how long it has been unreachable, and work is only handed to a
 * node that is connected, so a pending node should hold none. Anything that does get stranded
 * there is still covered by lease expiry.
 */
export function reclaimDue(lastHeartbeatAt: number | null, now: number, offlineAfterMs: number, reclaimGraceMs: number): boolean {
  if (lastHeartbeatAt === null) return false;
  return ageOf(lastHeartbeatAt, now) > offlineAfterMs + reclaimGraceMs;
}
