// The audit trail of invocations: counts and failures per deployment, never payloads. Counted in
// memory on the request path and written as one audit event per deployment per flush, so the
// trail costs the database a row a minute, not a row a request.
import type { AuditWriter } from "../audit/audit.js";
import { recordAudit, systemActor } from "../audit/audit.js";

export class InvokeCounts {
  private counts = new Map<string, Map<string, number>>();

  /** One finished request: "ok" or the Connect code name it failed with. */
  record(deploymentId: string, outcome: string): void {
    const byOutcome = this.counts.get(deploymentId) ?? new Map<string, number>();
    this.counts.set(deploymentId, byOutcome);
    byOutcome.set(outcome, (byOutcome.get(outcome) ?? 0) + 1);
  }

  /** What was counted since the last take, by deployment; starts counting afresh. */
  take(): Map<string, Map<string, number>> {
    const taken = this.counts;
    this.counts = new Map();
    return taken;
  }

  /** Writes one "deployment.invocations" audit event per deployment that had requests. */
  async flush(db: AuditWriter, at: Date): Promise<void> {
    for (const [deploymentId, byOutcome] of this.take()) {
      const details = Object.fromEntries([...byOutcome].map(([k, v]) => [k, String(v)]));
      await recordAudit(
        db,
        { actor: systemActor, action: "deployment.invocations", targetType: "deployment", targetId: deploymentId, details },
        at,
      );
    }
  }
}
