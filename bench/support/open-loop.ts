// Open-loop load: requests started at a fixed rate whatever the answers do, as independent users
// send them, and each latency counted from when its request was due, not from when it went out, so
// a stalled server (or a stalled load generator) shows in the tail instead of slowing the sender
// down (coordinated omission).

export interface OpenLoopResult {
  /** Latencies of the requests answered well, ms from when each was due. */
  latencies: number[];
  sent: number;
  failed: number;
  /** The first failure's message, for the report. */
  firstError: string | undefined;
}

/** `rate` requests/s of `call` for `seconds`; resolves once every request has ended. */
export async function openLoop(call: () => Promise<void>, rate: number, seconds: number): Promise<OpenLoopResult> {
  const total = Math.max(1, Math.round(rate * seconds));
  const interval = 1000 / rate;
  const out: OpenLoopResult = { latencies: [], sent: 0, failed: 0, firstError: undefined };
  const pending: Promise<void>[] = [];
  const t0 = performance.now();
  const fire = (due: number) =>
    call().then(
      () => void out.latencies.push(performance.now() - due),
      (err: unknown) => {
        out.failed++;
        out.firstError ??= (err as Error)?.message ?? String(err);
      },
    );
  await new Promise<void>((resolve) => {
    const tick = () => {
      const now = performance.now();
      // Every request due by now, each with its own due time: a late timer sends a burst, as users would.
      while (out.sent < total && t0 + out.sent * interval <= now) pending.push(fire(t0 + out.sent++ * interval));
      if (out.sent >= total) return resolve();
      setTimeout(tick, Math.max(0, t0 + out.sent * interval - performance.now()));
    };
    tick();
  });
  await Promise.all(pending);
  return out;
}
