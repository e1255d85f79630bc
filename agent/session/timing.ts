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

/**
 * The wait a server asked for with `Retry-After` (whole seconds, as HTTP has it) when it is up but
 * not ready yet, jittered over its second half and capped at `maxMs`; undefined without a usable
 * hint. Such an answer says nothing about the server being down, so it must not grow the backoff.
 */
export function retryAfterDelay(header: string | null | undefined, maxMs: number, random: () => number = Math.random): number | undefined {
  if (header == null || !/^\d{1,4}$/.test(header.trim())) return undefined;
  const ms = Math.min(maxMs, Number(header.trim()) * 1000);
  return Math.floor(ms / 2 + (random() * ms) / 2);
}

/**
 * When a periodic task next runs, asked as it runs at `now`: one interval after it was due, not
 * after it ran, so a late run moves no later one; give or take `jitter` (a fraction) of the
 * interval, so runs that once fell together drift apart. After a stall of an interval or more the
 * missed runs are not made up, and the next comes anywhere from half an interval to one and a half
 * from now: every cadence the stall held ran at its end together, and a jitter of a few percent
 * would keep them together for hundreds of intervals.
 */
export function nextRunAt(dueAt: number, now: number, intervalMs: number, jitter: number, random: () => number = Math.random): number {
  const step = intervalMs * (1 + jitter * (2 * random() - 1));
  return dueAt + step > now ? dueAt + step : now + intervalMs * (0.5 + random());
}
