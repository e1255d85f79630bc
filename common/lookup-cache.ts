// A database lookup reused for a short while: on a hot path (every invoke, every service-key
// check) the same answer is read again and again. Misses are cached too, so a flood of unknown
// keys costs no queries. Bounded: when full, the entry read longest ago makes room.
//
// While the source cannot be reached, a cache given `StaleAnswers` answers with what it last read,
// up to `forMs` after that read, instead of failing: serving continues through an outage for
// whatever was recently looked up, and only what was never read (or read too long ago) fails.
//
// Callers asking for a key while it is being read share that read: a burst of requests arriving
// just after an entry expired costs one query, not one each (on PGlite each runs in the event loop
// that serves them). A deletion drops what reads in progress would store, and later callers do not
// share them, so nothing read before a change outlives it.
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
  /** Reads in progress, by key. */
  private readonly loading = new Map<string, Promise<V>>();
  /** Bumped by every deletion: a read begun before one is not stored. */
  private generation = 0;

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
    try {
      return await this.read(key, load, now);
    } catch (err) {
      if (answer === "load-or-stale" && stale!.unreachable(err)) return hit!.value;
      throw err;
    }
  }

  /** One read of `key` at a time, stored (dated `now`, when it began) unless a deletion came first. */
  private read(key: string, load: () => Promise<V>, now: number): Promise<V> {
    const running = this.loading.get(key);
    if (running !== undefined) return running;
    const generation = this.generation;
    const reading = load()
      .then((value) => {
        if (this.generation === generation) this.store(key, value, now);
        return value;
      })
      .finally(() => {
        if (this.loading.get(key) === reading) this.loading.delete(key);
      });
    this.loading.set(key, reading);
    return reading;
  }

  private store(key: string, value: V, at: number): void {
    // Re-inserted, so the map's order is the order of reads: the first entry is the oldest.
    this.entries.delete(key);
    if (this.entries.size >= this.maxEntries) this.entries.delete(this.entries.keys().next().value!);
    this.entries.set(key, { value, at });
  }

  delete(key: string): void {
    this.forgetReads();
    this.entries.delete(key);
  }

  /** Drops every entry the predicate picks. */
  deleteWhere(pick: (key: string, value: V) => boolean): void {
    this.forgetReads();
    for (const [key, entry] of this.entries) if (pick(key, entry.value)) this.entries.delete(key);
  }

  clear(): void {
    this.forgetReads();
    this.entries.clear();
  }

  /** What reads in progress return is not stored, and later callers do not share them: they may predate the change. */
  private forgetReads(): void {
    this.generation++;
    this.loading.clear();
  }
}
