// Prefix-aware routing, pure: send a request where its prompt's head was computed before, unless
// that replica is busier than the rest by a margin. Beside ./rules.ts's pickReplica, which it
// falls back on: power of two choices on load.
import { openReplicas, powerOfTwo, type ReplicaLoad, weightOf } from "./rules.js";

/** Why a replica was chosen, as modelforge_prefix_routing_total counts it. */
export type PrefixDecision =
  /** The replica the request's session (prompt_cache_key or user) was last sent to. */
  | "session"
  /** The replica holding the longest matched prefix. */
  | "matched"
  /** Nothing matched enough: power of two choices. */
  | "no_match"
  /** The replica that matched (or held the session) was too busy: power of two choices. */
  | "overloaded";

export interface PrefixPolicy {
  /** A match counts when it covers at least this share of the prompt's blocks ... */
  minShare: number;
  /** ... and at least this many blocks. */
  minBlocks: number;
  /** The preferred replica is passed over when it has more than this many requests beyond the least loaded one. */
  overloadMargin: number;
}

/**
 * Ray Serve's 10 % match threshold. A margin of 3 requests: in bench/prefix-routing.ts 2 lost more of
 * each conversation's own cache, and 4 let one system prompt shared by all pile conversations up.
 */
export const defaultPrefixPolicy: PrefixPolicy = { minShare: 0.1, minBlocks: 1, overloadMargin: 3 };

/** What the index knows of one request. */
export interface PrefixHints<T> {
  /** Whole blocks in the prompt. */
  promptBlocks: number;
  /** Leading blocks of the prompt each candidate was sent before. */
  matched(candidate: T): number;
  /** The replica the request's session was last sent to, if any. */
  session: T | undefined;
}

export interface PrefixChoice<T> {
  replica: T | undefined;
  decision: PrefixDecision;
}

/**
 * The replica for a request by its prompt: its session's replica, else the one holding its longest
 * prefix when that covers enough of the prompt, else power of two choices. A preferred replica
 * more than `overloadMargin` requests above the least loaded open one is passed over (decision
 * overloaded). Only replicas below their bound are considered; undefined when none is.
 */
export function pickByPrefix<T>(
  candidates: readonly T[],
  load: (c: T) => ReplicaLoad,
  bound: number,
  random: () => number,
  hints: PrefixHints<T>,
  policy: PrefixPolicy = defaultPrefixPolicy,
): PrefixChoice<T> {
  const open = openReplicas(candidates, load, bound);
  if (open.length === 0) return { replica: undefined, decision: "no_match" };
  const weights = open.map((c) => weightOf(load(c)));
  const least = Math.min(...weights);
  const calm = (i: number) => weights[i]! - least <= policy.overloadMargin;
  let passedOver = false;
  const session = hints.session === undefined ? -1 : open.indexOf(hints.session);
  if (session >= 0) {
    if (calm(session)) return { replica: open[session], decision: "session" };
    passedOver = true;
  }
  const best = longestMatch(open, weights, hints.matched);
  const needed = Math.max(policy.minBlocks, Math.ceil(policy.minShare * hints.promptBlocks));
  if (best.index >= 0 && best.blocks >= needed) {
    if (calm(best.index)) return { replica: open[best.index], decision: "matched" };
    passedOver = true;
  }
  return { replica: powerOfTwo(open, load, random), decision: passedOver ? "overloaded" : "no_match" };
}

/** The candidate with the most matched blocks (the less loaded on a tie); index -1 when none matched. */
function longestMatch<T>(open: readonly T[], weights: readonly number[], matched: (c: T) => number): { index: number; blocks: number } {
  let index = -1;
  let blocks = 0;
  for (let i = 0; i < open.length; i++) {
    const m = matched(open[i]!);
    if (m > blocks || (m === blocks && m > 0 && weights[i]! < weights[index]!)) {
      index = i;
      blocks = m;
    }
  }
  return { index, blocks };
}
