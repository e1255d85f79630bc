// Where each deployment's prompts were sent, approximately: for every block hash (./prefix-blocks.ts)
// the replicas it was last sent to, in an LRU bounded by a memory budget per deployment, and for
// each session key the replica its conversation stays on. Kept on this control plane only: each
// plane routes among the replicas whose Sessions it holds, so nothing here is worth sharing.
//
// A replica is known by its identity: its slot and the runtime it runs (../deployments/routes.ts
// `runtimeId`), so one that restarted or changed revision is a new replica whose cache is empty,
// and the old one's entries are forgotten once its route no longer lists it.

/** Heap bytes one indexed block costs at most, measured (test/unit/prefix-index.test.ts): the budget's unit. */
export const bytesPerBlock = 128;
/** Conversations remembered per deployment for session affinity. */
export const maxSessions = 4096;
/**
 * Replicas of one deployment the index tells apart: the replicas holding a block are a bit mask,
 * kept a small integer. Past this many, the rest are routed by load alone.
 */
export const maxIndexedReplicas = 30;

export class PrefixIndex {
  /** Block hash to the mask of replica slots it was sent to; iteration order is recency (oldest first). */
  private readonly blocks = new Map<number, number>();
  /** Session key hash to replica identity, oldest first. */
  private readonly sessions = new Map<number, string>();
  private readonly slotOf = new Map<string, number>();
  private readonly identities: (string | undefined)[] = new Array(maxIndexedReplicas).fill(undefined);
  private readonly depth = new Int32Array(maxIndexedReplicas);

  constructor(readonly maxBlocks: number) {}

  /** Blocks held now. */
  get size(): number {
    return this.blocks.size;
  }

  /**
   * How many of the prompt's leading blocks each replica was sent, by identity (absent: none). The
   * walk stops at the first block no replica was sent, as nothing past it can match.
   */
  matches(hashes: readonly number[]): Map<string, number> {
    this.depth.fill(0);
    let i = 0;
    for (; i < hashes.length; i++) {
      const mask = this.blocks.get(hashes[i]!);
      if (mask === undefined) break;
      for (let bits = mask, slot = 0; bits !== 0; bits >>>= 1, slot++) if ((bits & 1) !== 0) this.depth[slot] = i + 1;
    }
    const found = new Map<string, number>();
    if (i === 0) return found;
    for (let slot = 0; slot < maxIndexedReplicas; slot++) {
      const identity = this.identities[slot];
      if (this.depth[slot]! > 0 && identity !== undefined) found.set(identity, this.depth[slot]!);
    }
    return found;
  }

  /**
   * The prompt's blocks were sent to this replica. They are touched last block first, so a
   * prompt's head (shared by every later turn) is the last of it the LRU lets go.
   */
  record(hashes: readonly number[], identity: string): void {
    const slot = this.slot(identity);
    if (slot === undefined) return;
    const bit = 1 << slot;
    for (let i = hashes.length - 1; i >= 0; i--) {
      const h = hashes[i]!;
      const mask = this.blocks.get(h);
      if (mask !== undefined) this.blocks.delete(h);
      this.blocks.set(h, (mask ?? 0) | bit);
    }
    for (let over = this.blocks.size - this.maxBlocks; over > 0; over--) {
      this.blocks.delete(this.blocks.keys().next().value!);
    }
  }

  /** The replica a session was last sent to. */
  session(key: number): string | undefined {
    return this.sessions.get(key);
  }

  bindSession(key: number, identity: string): void {
    this.sessions.delete(key);
    this.sessions.set(key, identity);
    if (this.sessions.size > maxSessions) this.sessions.delete(this.sessions.keys().next().value!);
  }

  /** Forgets every replica not among `live`: its blocks, its sessions and its slot. */
  retain(live: ReadonlySet<string>): void {
    let gone = 0;
    for (const [identity, slot] of this.slotOf) {
      if (live.has(identity)) continue;
      gone |= 1 << slot;
      this.slotOf.delete(identity);
      this.identities[slot] = undefined;
    }
    if (gone === 0) return;
    for (const [h, mask] of this.blocks) {
      const left = mask & ~gone;
      if (left === 0) this.blocks.delete(h);
      else if (left !== mask) this.blocks.set(h, left);
    }
    for (const [key, identity] of this.sessions) if (!this.slotOf.has(identity)) this.sessions.delete(key);
  }

  /** Blocks per replica identity, for the metrics (a pass over the index: at scrape time only). */
  blocksByReplica(): Map<string, number> {
    const counts = new Array<number>(maxIndexedReplicas).fill(0);
    for (const mask of this.blocks.values()) {
      for (let bits = mask, slot = 0; bits !== 0; bits >>>= 1, slot++) if ((bits & 1) !== 0) counts[slot]! += 1;
    }
    const byReplica = new Map<string, number>();
    for (const [identity, slot] of this.slotOf) byReplica.set(identity, counts[slot]!);
    return byReplica;
  }

  private slot(identity: string): number | undefined {
    const known = this.slotOf.get(identity);
    if (known !== undefined) return known;
    const free = this.identities.indexOf(undefined);
    if (free < 0) return undefined;
    this.identities[free] = identity;
    this.slotOf.set(identity, free);
    return free;
  }
}
