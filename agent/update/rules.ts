// The self-update decisions, pure for table tests: what a start does with a pending update, and
// whether a downloaded file may be swapped in.

import type { PendingUpdate } from "./layout.js";

/** Starts of a new agent before it is rolled back, whatever the deadline says. */
export const MAX_UPDATE_ATTEMPTS = 3;

export type StartDecision = { kind: "run" } | { kind: "try"; attempts: number } | { kind: "roll back"; reason: string };

/** At a start: run as is (nothing pending), try the new agent once more, or roll it back. */
export function startDecision(pending: PendingUpdate | undefined, now: number): StartDecision {
  if (pending === undefined) return { kind: "run" };
  if (now >= pending.deadlineAt) {
    return { kind: "roll back", reason: `rolled back: ${pending.version} did not reach a healthy session by its deadline` };
  }
  if (pending.attempts >= MAX_UPDATE_ATTEMPTS) {
    return { kind: "roll back", reason: `rolled back: ${pending.version} exited ${pending.attempts} times before a healthy session` };
  }
  return { kind: "try", attempts: pending.attempts + 1 };
}

/** Why downloaded bytes may not even be run (to ask their version), or undefined when they may. */
export function contentRefusal(
  want: { sha256: string; sizeBytes: number },
  got: { sha256: string; sizeBytes: number; signatureValid: boolean | undefined },
): string | undefined {
  if (got.sizeBytes !== want.sizeBytes) return `refused: downloaded ${got.sizeBytes} bytes, the release has ${want.sizeBytes}`;
  if (got.sha256 !== want.sha256) return `refused: digest mismatch (sha256 ${got.sha256}, the release says ${want.sha256})`;
  if (got.signatureValid === false) return "refused: the signature does not verify against the release signing key";
  return undefined;
}

/** Why a verified file may not be swapped in: it must say the version it was released as. */
export function versionRefusal(want: string, reported: string | undefined): string | undefined {
  if (reported === want) return undefined;
  return `refused: the file reports version ${reported === undefined ? "nothing" : `"${reported.slice(0, 64)}"`}, not ${want}`;
}
