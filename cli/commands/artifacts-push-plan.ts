// How `forge artifacts push` splits a commit into calls. Pure, so its bounds have table tests.

/**
 * Consecutive groups of at most `maxFiles` items whose sizes add up to at most `maxBytes` (an item
 * larger than `maxBytes` on its own is a group of one: the caller sends such items another way).
 */
export function groupsOf<T extends { size: number }>(items: readonly T[], maxFiles: number, maxBytes: number): T[][] {
  const groups: T[][] = [];
  let group: T[] = [];
  let bytes = 0;
  for (const item of items) {
    if (group.length > 0 && (group.length >= maxFiles || bytes + item.size > maxBytes)) {
      groups.push(group);
      group = [];
      bytes = 0;
    }
    group.push(item);
    bytes += item.size;
  }
  if (group.length > 0) groups.push(group);
  return groups;
}

export interface SendPlan<T> {
  /** Sent whole, many to a call. */
  small: T[];
  /** Streamed chunk by chunk. */
  large: T[];
  /** Content a file before it also has: recorded without bytes once that one is stored. */
  repeats: T[];
}

/** The files the store lacks, by how their bytes travel: each content once, small ones batched. */
export function planSends<T extends { size: number; sha256: string }>(missing: readonly T[], smallBytes: number): SendPlan<T> {
  const plan: SendPlan<T> = { small: [], large: [], repeats: [] };
  const seen = new Set<string>();
  for (const file of missing) {
    if (seen.has(file.sha256)) plan.repeats.push(file);
    else if (file.size <= smallBytes) plan.small.push(file);
    else plan.large.push(file);
    seen.add(file.sha256);
  }
  return plan;
}
