// A database lookup reused for a short while: on a hot path (every invoke, every service-key
// check) the same answer is read again and again. Misses are cached too, so a flood of unknown
// keys costs no queries. Bounded by starting over when full, which is cheap and never wrong.
import type { Clock } from "./clock.js";

export class LookupCache<V> {
  private readonly entries = new Map<string, { value: V; at: number }>();

  constructor(
    private readonly clock: Pick<Clock, "now">,
    private readonly ttlMs: number,
    private readonly maxEntries = 10_000,
  ) {}

  async get(key: string, load: () => Promise<V>): Promise<V> {
    const now = this.clock.now();
    const hit = this.entries.get(key);
    if (hit !== undefined && now - hit.at < this.ttlMs) return hit.value;
    const value = await load();
    if (this.entries.size >= this.maxEntries) this.entries.clear();
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
