// The audit trail of invocations: counts and failures per deployment, never payloads. Counted in
// memory on the request path and written as one audit event per deployment per flush, so the
// trail costs the database a row a minute, not a row a request. A flush is one statement, written
// whole or not at all; one that fails (the database is away) keeps its counts for the next, added
// to what was counted meanwhile. A write whose commit succeeded but whose answer was lost is
// counted again: the trail errs towards a flush twice over a flush lost.
import type { AuditWriter } from "../audit/audit.js";
import { recordAudits, systemActor } from "../audit/audit.js";

/** Requests by deployment, then by outcome ("ok" or a Connect code name). */
export type Counts = Map<string, Map<string, number>>;

/** Pure: the sum of two sets of counts, leaving both unchanged. */
export function mergeCounts(a: Counts, b: Counts): Counts {
  const sum: Counts = new Map([...a].map(([deploymentId, byOutcome]) => [deploymentId, new Map(byOutcome)]));
  for (const [deploymentId, byOutcome] of b) {
    const into = sum.get(deploymentId) ?? new Map<string, number>();
    sum.set(deploymentId, into);
    for (const [outcome, n] of byOutcome) into.set(outcome, (into.get(outcome) ?? 0) + n);
  }
  return sum;
}

export class InvokeCounts {
  private counts: Counts = new Map();

  /** One finished request: "ok" or the Connect code name it failed with. */
  record(deploymentId: string, outcome: string): void {
    const byOutcome = this.counts.get(deploymentId) ?? new Map<string, number>();
    this.counts.set(deploymentId, byOutcome);
    byOutcome.set(outcome, (byOutcome.get(outcome) ?? 0) + 1);
  }

  /** What was counted since the last take, by deployment; starts counting afresh. */
  take(): Counts {
    const taken = this.counts;
    this.counts = new Map();
    return taken;
  }

  /** Writes one "deployment.invocations" audit event per deployment that had requests; on failure keeps them for the next flush. */
  async flush(db: AuditWriter, at: Date): Promise<void> {
    const taken = this.take();
    if (taken.size === 0) return;
    const entries = [...taken].map(([deploymentId, byOutcome]) => ({
      actor: systemActor,
      action: "deployment.invocations",
      targetType: "deployment" as const,
      targetId: deploymentId,
      details: Object.fromEntries([...byOutcome].map(([k, v]) => [k, String(v)])),
    }));
    try {
      await recordAudits(db, entries, at);
    } catch (err) {
      this.counts = mergeCounts(taken, this.counts);
      throw err;
    }
  }
}
