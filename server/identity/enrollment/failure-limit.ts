// How many failed enrollments a peer address may make: a token bucket per address. Each failure
// takes a token; tokens come back one per `refillMs` up to `burst`; with none left the peer is
// refused before its token is even looked at, until one has come back. Every attempt reserves a
// token while it runs and gives it back unless it failed as a guess, so concurrent attempts hold
// to the same bound as sequential ones (checking without reserving let a burst of slow attempts,
// each with a real CSR, all through before the first failure was counted). Successful
// enrollments cost nothing. A peer refused only because of its attempts in flight is told so,
// and to retry within a second. In memory, per replica: the point is to make guessing slow and cheap to
// refuse, not to count exactly across replicas. The caller passes the clock (monotonic milliseconds).
import { isIPv6 } from "node:net";

export interface FailureLimitPolicy {
  /** Failures a peer may make in a row before it is slowed down; also its most attempts in flight. */
  burst: number;
  /** One more failure is allowed per this many milliseconds. */
  refillMs: number;
  /** Most peers tracked at once; beyond it the least recently active is forgotten. */
  maxPeers: number;
}

export const enrollmentFailureLimit: FailureLimitPolicy = { burst: 5, refillMs: 5_000, maxPeers: 10_000 };

/**
 * Why a peer may not try now: it has failed too often (a guesser, or a node with a bad token), or
 * it already has `burst` attempts running (many nodes behind one address, enrolling at once).
 */
export interface PeerRefusal {
  cause: "failures" | "in_flight";
  waitMs: number;
}

/** How soon a peer held back only by its own attempts in flight may try again. */
const busyRetryMs = 1_000;

/** Tokens are kept as milliseconds of refill (one token = `refillMs`), so the arithmetic is exact. */
interface Bucket {
  credit: number;
  at: number;
  /** Attempts admitted and not yet settled, each holding a token. */
  reserved: number;
}

export class FailureLimiter {
  // Map order is least recently active first, which is what is evicted when full.
  private readonly buckets = new Map<string, Bucket>();

  constructor(private readonly policy: FailureLimitPolicy) {}

  get size(): number {
    return this.buckets.size;
  }

  /** Undefined when `peer` may try now (a token is then reserved until `settle`), else why not and how many milliseconds until it may. */
  admit(peer: string, now: number): PeerRefusal | undefined {
    const bucket = this.buckets.get(peer);
    const credit = bucket === undefined ? this.full : this.creditAt(bucket, now);
    const reserved = bucket?.reserved ?? 0;
    const available = credit - reserved * this.policy.refillMs;
    if (available < this.policy.refillMs) {
      const waitMs = Math.ceil(this.policy.refillMs - available);
      // With a token of its own left, only the attempts it has running hold the peer back.
      const cause = credit >= this.policy.refillMs ? "in_flight" : "failures";
      return { cause, waitMs: reserved > 0 ? Math.min(waitMs, busyRetryMs) : waitMs };
    }
    this.store(peer, { credit, at: now, reserved: reserved + 1 });
    return undefined;
  }

  /** Ends an admitted attempt: its token is given back unless it `failed` (was a guess). */
  settle(peer: string, now: number, failed: boolean): void {
    const bucket = this.buckets.get(peer);
    if (bucket === undefined) return; // forgotten while it ran
    const credit = Math.max(0, this.creditAt(bucket, now) - (failed ? this.policy.refillMs : 0));
    const reserved = Math.max(0, bucket.reserved - 1);
    if (credit >= this.full && reserved === 0)
      this.buckets.delete(peer); // nothing to remember
    else this.store(peer, { credit, at: now, reserved });
  }

  private store(peer: string, bucket: Bucket): void {
    this.buckets.delete(peer);
    this.buckets.set(peer, bucket);
    if (this.buckets.size > this.policy.maxPeers) this.buckets.delete(this.buckets.keys().next().value!);
  }

  private get full(): number {
    return this.policy.burst * this.policy.refillMs;
  }

  private creditAt(bucket: Bucket, now: number): number {
    return Math.min(this.full, bucket.credit + Math.max(0, now - bucket.at));
  }
}

/**
 * The address a limit applies to: IPv4 as is (also when IPv4-mapped), IPv6 by its /64, since
 * one host commonly holds a whole /64 and could otherwise walk through it.
 */
export function peerKey(address: string | undefined): string {
  if (address === undefined || address === "") return "unknown";
  const mapped = /^::ffff:(\d+\.\d+\.\d+\.\d+)$/i.exec(address);
  if (mapped !== null) return mapped[1]!;
  if (!isIPv6(address)) return address;
  const [head = "", tail = ""] = address.split("::");
  const left = head === "" ? [] : head.split(":");
  const right = tail === "" ? [] : tail.split(":");
  const groups = address.includes("::") ? [...left, ...Array<string>(8 - left.length - right.length).fill("0"), ...right] : left;
  return `${groups
    .slice(0, 4)
    .map((g) => parseInt(g, 16).toString(16))
    .join(":")}::/64`;
}
