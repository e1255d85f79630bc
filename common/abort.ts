// Reacting to an AbortSignal that may already have fired: a listener added after the abort is
// never called, which once left a stopped agent running a new session (test/integration/agent-watchdog.test.ts
// "agent stop"). Every such listener goes through here.

import { Cancel } from "./cancel.js";

/** Calls `fn` when `signal` aborts, or now if it already has; returns what removes the listener. */
export function onAbort(signal: AbortSignal | Cancel, fn: () => void): () => void {
  if (signal instanceof Cancel) return signal.onAbort(fn);
  if (signal.aborted) {
    fn();
    return () => undefined;
  }
  signal.addEventListener("abort", fn, { once: true });
  return () => signal.removeEventListener("abort", fn);
}
