// A database lookup reused for a short while: on a hot path (every invoke, every service-key
// check) the same answer is read again and again. Misses are cached too, so a flood of unknown
// keys costs no queries. Bounded: when full, the entry read longest ago makes room.
//
// While the source cannot be reached, a cache given `StaleAnswers` answers with what it last read,
// up to `forMs` after that read, instead of failing: serving continues through an outage for
// whatever was recently looked up, and only what was never read (or read too long ago) fails.
import type { Clock } from "./clock.js";

/** When and for how long a value read before may still be answered while its source is away. */
export interface StaleAnswers {
  /** How long after it was read a value may still be answered (Infinity: as long as it is held). */
  forMs: number;
  /** Whether a failed load means the source cannot be reached (rather than a bug or a bad request). */
  unreachable(err: unknown): boolean;
  /** True while the source is known to be away: a value still within `forMs` is answered without trying the source. */
  known(): boolean;
}

/** What a lookup does with what it holds: answer it, answer it without trying the source, or load (and maybe fall back to it). */
export type CachedAnswer = "fresh" | "stale" | "load-or-stale" | "load";

/** Pure: the answer for an entry read `ageMs` ago (undefined: nothing held). */
export function cachedAnswer(ageMs: number | undefined, ttlMs: number, staleForMs: number, sourceAway: boolean): CachedAnswer {
  if (ageMs === undefined) return "load";
  if (ageMs < ttlMs) return "fresh";
  if (ageMs >= staleForMs) return "load";
  return sourceAway ? "stale" : "load-or-stale";
}

export class LookupCache<V> {
  private readonly entries = new Map<string, { value: V; at: number }>();

  constructor(
    private readonly clock: Pick<Clock, "now">,
    private readonly ttlMs: number,
    private readonly stale?: StaleAnswers,
    private readonly maxEntries = 10_000,
  ) {}

  async get(key: string, load: () => Promise<V>): Promise<V> {
    const now = this.clock.now();
    const hit = this.entries.get(key);
    const stale = this.stale;
    const answer = cachedAnswer(hit && now - hit.at, this.ttlMs, stale?.forMs ?? 0, stale?.known() ?? false);
    if (answer === "fresh" || answer === "stale") return hit!.value;
    let value: V;
    try {
      value = await load();
    } catch (err) {
      if (answer === "load-or-stale" && stale!.unreachable(err)) return hit!.value;
      throw err;
    }
    // Re-inserted, so the map's order is the order of reads: the first entry is the oldest.
    this.entries.delete(key);
    if (this.entries.size >= this.maxEntries) this.entries.delete(this.entries.keys().next().value!);
    this.entries.set(key, { value, at: now });
    return value;
  }

  delete(key: string): void {
    this.entries.delete(key);
  }

  /** Drops every entry the predicate picks. */
  deleteWhere(pick: (key: string, value: V) => boolean): void {
    for (const [key, entry] of this.entries) if (pick(key, entry.value)) this.entries.delete(key);
  }

  clear(): void {
    this.entries.clear();
  }
}
