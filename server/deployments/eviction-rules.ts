// Which idle replica makes room for a replica that fits no node, pure. A candidate is a ready
// replica of another autoscaled, serving deployment, above its min_replicas (the slot a scale-down
// by one removes), of the requester's priority or lower, and idle: nothing in flight or held, and
// no request for the stated minimum. The lowest priority goes first; among equals the least
// recently used, weighted by its measured load time, so a model that takes 40 s to load is kept
// over one idle as long that takes 2 s (llama-swap weighs its evictions by load time too).
import { seconds } from "./autoscale-rules.js";

export interface EvictionCandidate {
  deploymentId: string;
  name: string;
  nodeId: string;
  revision: bigint;
  replica: number;
  priority: number;
  /** Since its deployment's latest request (or, none known, since the replica became ready). */
  idleMs: number;
  /** How long the replica took from placed to ready; undefined when its history does not say. */
  loadMs: number | undefined;
}

/** A load time nobody measured counts as this. */
const unmeasuredLoadMs = 1_000;

/** How strongly a candidate is kept: idle time per second of load; the lower, the sooner it goes. */
const staleness = (c: EvictionCandidate) => c.idleMs / Math.max(c.loadMs ?? unmeasuredLoadMs, 1);

/** The candidates in the order they are evicted. */
export function evictionOrder(candidates: readonly EvictionCandidate[]): EvictionCandidate[] {
  return [...candidates].sort(
    (a, b) =>
      a.priority - b.priority ||
      staleness(b) - staleness(a) ||
      a.name.localeCompare(b.name) ||
      a.nodeId.localeCompare(b.nodeId) ||
      a.replica - b.replica,
  );
}

/** The audit's and the log's words for an eviction. */
export function evictionReason(victim: EvictionCandidate, forName: string): string {
  const load = victim.loadMs === undefined ? "its load time unmeasured" : `loads in ${(victim.loadMs / 1000).toFixed(1)} s`;
  return `evicted from node ${victim.nodeId} to make room for ${forName}: idle ${seconds(victim.idleMs)}, ${load}, priority ${victim.priority}`;
}

/**
 * What a PENDING replica's reason adds when eviction could not make room: nothing where no
 * autoscaled replica of this priority or lower is on the nodes (a fleet of fixed counts).
 * `considered`: those replicas; `candidates`: the idle ones among them.
 */
export function noEvictionReason(candidates: number, considered: number): string | undefined {
  if (considered === 0) return undefined;
  if (candidates === 0) {
    return `none of ${considered} autoscaled ${considered === 1 ? "replica" : "replicas"} of this priority or lower can be evicted (busy, used in the last while, or at min_replicas)`;
  }
  return `evicting any of ${candidates} idle ${candidates === 1 ? "replica" : "replicas"} would not make room on a node that fits`;
}
