// The agent's timing rules, pure so they can be tested without waiting.

/** Exponential backoff with full jitter: a fleet reconnecting at once spreads out. */
export function backoffDelay(attempt: number, baseMs: number, maxMs: number, random: () => number = Math.random): number {
  const ceiling = Math.min(maxMs, baseMs * 2 ** Math.min(attempt, 30));
  return Math.floor(random() * ceiling);
}

/** Renew when no more than `fraction` of the certificate's lifetime remains. */
export function renewalDue(notBefore: number, notAfter: number, now: number, fraction: number): boolean {
  const lifetime = notAfter - notBefore;
  return notAfter - now <= lifetime * fraction;
}
