// A control plane that refuses this agent's version at Hello (failed_precondition, naming both
// versions: docs/protocol.md, "Version skew policy") will refuse it again until the agent is upgraded or
// the server's floor lowered. So the agent neither hot-loops nor floods its log: it retries at the
// slowest backoff pace and repeats its error line at most every ten minutes. Pure: the caller
// passes the clock and the randomness.
import { Code, ConnectError } from "@connectrpc/connect";

/** The server's reason when `err` is a version refusal at Hello. */
export function versionRefusalOf(err: unknown): string | undefined {
  const ce = ConnectError.from(err);
  return ce.code === Code.FailedPrecondition ? ce.rawMessage : undefined;
}

/** The wait before trying again: the longest backoff, jittered over its second half. */
export function versionRefusalDelay(maxMs: number, random: () => number = Math.random): number {
  return Math.floor(maxMs / 2 + (random() * maxMs) / 2);
}

/** Says when the refusal is worth an error line again. */
export class VersionRefusals {
  private advisedAt: number | undefined;

  constructor(private readonly repeatMs = 10 * 60_000) {}

  /** True when the operator should be told (the first refusal, then at most every `repeatMs`). */
  due(now: number): boolean {
    if (this.advisedAt !== undefined && now - this.advisedAt < this.repeatMs) return false;
    this.advisedAt = now;
    return true;
  }

  /** A session was established: a later refusal is news again. */
  accepted(): void {
    this.advisedAt = undefined;
  }
}
