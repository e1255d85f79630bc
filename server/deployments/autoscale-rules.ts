// The autoscaler's rule, pure: from a deployment's settings, its wanted replicas and the load the
// control planes measured, the replicas it should want now. A change waits out its delay (the
// load must stay past the target that long, as Ray Serve's upscale and downscale delays do),
// except that a deployment at zero with a request held goes to one at once, and one that saw no
// request for scale_to_zero_after goes to zero (the idle time is its delay).
import { Code, ConnectError } from "@connectrpc/connect";
import { MAX_IN_FLIGHT, MAX_REPLICAS } from "./rules.js";

export interface AutoscalePolicy {
  minReplicas: number;
  maxReplicas: number;
  /** Requests in flight plus held per replica that the autoscaler aims at. */
  targetInFlight: number;
  upscaleDelayMs: number;
  downscaleDelayMs: number;
  /** With minReplicas 0: no request for this long scales to zero. */
  scaleToZeroAfterMs: number;
}

export const DEFAULT_UPSCALE_DELAY_MS = 30_000;
export const DEFAULT_DOWNSCALE_DELAY_MS = 600_000;
export const DEFAULT_SCALE_TO_ZERO_AFTER_MS = 15 * 60_000;
export const DEFAULT_COLD_START_TIMEOUT_MS = 120_000;
const HOUR_MS = 3_600_000;
const MAX_DOWNSCALE_DELAY_MS = 24 * HOUR_MS;
const MIN_SCALE_TO_ZERO_AFTER_MS = 1_000;
const MAX_SCALE_TO_ZERO_AFTER_MS = 30 * 24 * HOUR_MS;

/** What the control planes measured of one deployment. */
export interface ScaleSignal {
  /** Requests in flight plus held, summed over the control planes, averaged over the window. */
  load: number;
  /** Requests held for a cold start right now, on any control plane. */
  held: number;
  /** The latest request any control plane took, in epoch ms; undefined when none is known. */
  lastRequestAt: number | undefined;
}

/** A change the rule wants but whose delay has not passed: toward how many, since when. */
export interface PendingScale {
  replicas: number;
  since: number;
}

export interface ScaleInput {
  policy: AutoscalePolicy;
  /** The replicas the deployment wants now. */
  current: number;
  signal: ScaleSignal;
  pending: PendingScale | undefined;
  now: number;
  /** When idleness is counted from if no request is known: the autoscaler's start, or the policy's last change. */
  watchedSince: number;
  /** The averaging window, for the reason's words. */
  windowMs: number;
}

export interface ScaleOutcome {
  /** Set when the deployment should now want this many replicas. */
  replicas?: number;
  /** Why, with the numbers (set with replicas). */
  reason?: string;
  /** The change still waiting out its delay, for the next round. */
  pending: PendingScale | undefined;
}

/** The replicas the load asks for, in [floor, max]: the load over the target, rounded up. */
export function wantedReplicas(policy: AutoscalePolicy, load: number, floor: number): number {
  // A load that averages a hair above a multiple of the target is float noise, not a replica more.
  const byLoad = load <= 0 ? 0 : Math.ceil(load / policy.targetInFlight - 1e-9);
  return Math.min(policy.maxReplicas, Math.max(floor, byLoad));
}

export function decideScale(input: ScaleInput): ScaleOutcome {
  const { policy, current, signal, now } = input;
  const idleMs = now - Math.max(signal.lastRequestAt ?? input.watchedSince, input.watchedSince);
  const called = signal.held > 0 || signal.load > 0;
  // At zero only a request brings a replica back; serving, one stays until the idle time has passed.
  const recentlyUsed = called || (current > 0 && idleMs < policy.scaleToZeroAfterMs);
  const floor = Math.max(policy.minReplicas, recentlyUsed ? 1 : 0);
  const wanted = wantedReplicas(policy, signal.load, floor);
  if (wanted === current) return { pending: undefined };
  if (current < policy.minReplicas || current > policy.maxReplicas) {
    return { replicas: wanted, reason: `outside its bounds (${policy.minReplicas} to ${policy.maxReplicas})`, pending: undefined };
  }
  if (current === 0) {
    const why = signal.held > 0 ? `cold start: ${plural(signal.held, "request")} held` : `${fixed(signal.load)} in flight`;
    return { replicas: wanted, reason: why, pending: undefined };
  }
  if (wanted === 0) {
    return {
      replicas: 0,
      reason: `no request for ${seconds(idleMs)} (scale to zero after ${seconds(policy.scaleToZeroAfterMs)})`,
      pending: undefined,
    };
  }
  const up = wanted > current;
  const delayMs = up ? policy.upscaleDelayMs : policy.downscaleDelayMs;
  // A change of direction starts its delay afresh; more of the same keeps the time already waited.
  const since = input.pending !== undefined && input.pending.replicas > current === up ? input.pending.since : now;
  if (now - since < delayMs) return { pending: { replicas: wanted, since } };
  return {
    replicas: wanted,
    reason: `${fixed(signal.load / current)} in flight per replica over ${seconds(input.windowMs)}, target ${policy.targetInFlight}`,
    pending: undefined,
  };
}

/** The settings an operator gave, with defaults filled in and each bound checked; invalid_argument names the field. */
export interface AutoscaleRequest {
  minReplicas: number;
  maxReplicas: number;
  targetInFlight: number;
  upscaleDelayMs: number | undefined;
  downscaleDelayMs: number | undefined;
  scaleToZeroAfterMs: number | undefined;
  coldStartTimeoutMs: number | undefined;
  priority: number;
}

export function checkAutoscaling(
  req: AutoscaleRequest,
  maxInFlight: number,
): AutoscalePolicy & { coldStartTimeoutMs: number; priority: number } {
  const invalid = (field: string, why: string) => new ConnectError(`autoscaling.${field}: ${why}`, Code.InvalidArgument);
  if (req.minReplicas > MAX_REPLICAS) throw invalid("min_replicas", `from 0 to ${MAX_REPLICAS}`);
  if (req.maxReplicas < 1 || req.maxReplicas > MAX_REPLICAS) throw invalid("max_replicas", `from 1 to ${MAX_REPLICAS}`);
  if (req.maxReplicas < req.minReplicas) throw invalid("max_replicas", `at least min_replicas (${req.minReplicas})`);
  if (!Number.isInteger(req.priority) || Math.abs(req.priority) > 1000) throw invalid("priority", "from -1000 to 1000");
  if (req.targetInFlight > MAX_IN_FLIGHT) throw invalid("target_in_flight", `from 1 to ${MAX_IN_FLIGHT} (0 for max_in_flight)`);
  const within = (ms: number | undefined, field: string, fallback: number, least: number, most: number, words: string) => {
    if (ms === undefined) return fallback;
    if (ms < least || ms > most) throw invalid(field, words);
    return ms;
  };
  return {
    minReplicas: req.minReplicas,
    maxReplicas: req.maxReplicas,
    targetInFlight: req.targetInFlight === 0 ? maxInFlight : req.targetInFlight,
    upscaleDelayMs: within(req.upscaleDelayMs, "upscale_delay", DEFAULT_UPSCALE_DELAY_MS, 0, HOUR_MS, "at most 1 hour"),
    downscaleDelayMs: within(
      req.downscaleDelayMs,
      "downscale_delay",
      DEFAULT_DOWNSCALE_DELAY_MS,
      0,
      MAX_DOWNSCALE_DELAY_MS,
      "at most 1 day",
    ),
    scaleToZeroAfterMs: within(
      req.scaleToZeroAfterMs,
      "scale_to_zero_after",
      DEFAULT_SCALE_TO_ZERO_AFTER_MS,
      MIN_SCALE_TO_ZERO_AFTER_MS,
      MAX_SCALE_TO_ZERO_AFTER_MS,
      "from 1 s to 30 days",
    ),
    coldStartTimeoutMs: within(req.coldStartTimeoutMs, "cold_start_timeout", DEFAULT_COLD_START_TIMEOUT_MS, 1, HOUR_MS, "at most 1 hour"),
    priority: req.priority,
  };
}

const fixed = (n: number) => (Number.isInteger(n) ? String(n) : n.toFixed(1));
const plural = (n: number, word: string) => `${n} ${word}${n === 1 ? "" : "s"}`;

/** A duration in the words an audit line uses: "30 s", "15 min", "2 h". */
export function seconds(ms: number): string {
  const s = Math.round(ms / 1000);
  if (s < 120) return `${s} s`;
  if (s < 7200) return `${Math.round(s / 60)} min`;
  return `${Math.round(s / 3600)} h`;
}
