// How many failed enrollments a peer address may make: a token bucket per address. Each failure
// takes a token; tokens come back one per `refillMs` up to `burst`; with none left the peer is
// refused before its token is even looked at, until one has come back. Successful enrollments
// cost nothing. Attempts are checked, not reserved, so a peer's concurrent attempts all get
// through once; each failure among them still costs a token, the bucket going into debt (up to
// `maxPenaltyMs`), so a concurrent burst buys a proportionally longer wait. In memory, per replica: the point is to make guessing slow and cheap to refuse,
// not to count exactly across replicas. The caller passes the clock (monotonic milliseconds).
import { isIPv6 } from "node:net";

export interface FailureLimitPolicy {
  /** Failures a peer may make in a row before it is slowed down. */
  burst: number;
  /** One more failure is allowed per this many milliseconds. */
  refillMs: number;
  /** Most peers tracked at once; beyond it the least recently failing is forgotten. */
  maxPeers: number;
  /** The longest wait failures can run up. */
  maxPenaltyMs: number;
}

export const enrollmentFailureLimit: FailureLimitPolicy = { burst: 5, refillMs: 5_000, maxPeers: 10_000, maxPenaltyMs: 15 * 60_000 };

/** Tokens are kept as milliseconds of refill (one token = `refillMs`), so the arithmetic is exact. */
interface Bucket {
  credit: number;
  at: number;
}

export class FailureLimiter {
  // Map order is least recently failing first, which is what is evicted when full.
  private readonly buckets = new Map<string, Bucket>();

  constructor(private readonly policy: FailureLimitPolicy) {}

  get size(): number {
    return this.buckets.size;
  }

  /** 0 when `peer` may try now, else how many milliseconds until it may. */
  retryAfterMs(peer: string, now: number): number {
    const bucket = this.buckets.get(peer);
    if (bucket === undefined) return 0;
    const credit = this.creditAt(bucket, now);
    if (credit >= this.full) this.buckets.delete(peer); // fully recovered: nothing to remember
    return Math.ceil(Math.max(0, this.policy.refillMs - credit));
  }

  /** Records a failed enrollment of `peer`. */
  failed(peer: string, now: number): void {
    const bucket = this.buckets.get(peer);
    const credit = bucket === undefined ? this.full : this.creditAt(bucket, now);
    this.buckets.delete(peer);
    this.buckets.set(peer, { credit: Math.max(this.policy.refillMs - this.policy.maxPenaltyMs, credit - this.policy.refillMs), at: now });
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
