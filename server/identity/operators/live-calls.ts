// The operators' streams open on this replica, by user, so that a deactivation ends them at once:
// here directly, and on every other replica through the cluster bus. Unary calls need no entry:
// each one reads the user's row when it starts.
import type { AbandonReason } from "../../context.js";

export class LiveOperatorCalls {
  private readonly byUser = new Map<string, Set<(reason: AbandonReason) => void>>();

  /** Registers an open stream; the returned function unregisters it. */
  hold(userId: string, end: (reason: AbandonReason) => void): () => void {
    const calls = this.byUser.get(userId) ?? new Set();
    this.byUser.set(userId, calls);
    calls.add(end);
    return () => {
      calls.delete(end);
      if (calls.size === 0 && this.byUser.get(userId) === calls) this.byUser.delete(userId);
    };
  }

  endCallsOf(userId: string): void {
    const calls = this.byUser.get(userId);
    if (calls === undefined) return;
    this.byUser.delete(userId);
    for (const end of calls) end("deactivated");
  }

  /** Open streams held, for tests and metrics. */
  get size(): number {
    let n = 0;
    for (const calls of this.byUser.values()) n += calls.size;
    return n;
  }
}
