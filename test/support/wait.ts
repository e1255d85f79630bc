// Waiting in tests without fixed sleeps: a condition is re-checked when something happens that
// may have made it true (a log line, process output), with a slow poll only as a fallback, and
// the deadline is generous because a busy machine (a laptop, a CI runner) is slow, not broken.

/** Default deadline of a wait: long enough for a saturated CPU, short of the test's own timeout. */
export const generousMs = 25_000;

/** Something that can announce that it changed. */
export interface Changes {
  /** Calls `listener` after each change; returns the unsubscribe function. */
  subscribe(listener: () => void): () => void;
}

export interface WaitOptions {
  /** Deadline in milliseconds (default generousMs). */
  timeout?: number;
  /** What is awaited, for the timeout's message (a function can describe the progress made). */
  what?: string | (() => string);
  /** Re-check on each change announced here. */
  on?: Changes;
  /** Re-check interval in milliseconds (default 100; 250 as a fallback to `on`). */
  interval?: number;
}

/** Resolves with the first truthy value of `check`; a throw counts as not yet, and is reported on timeout. */
export function waitFor<T>(check: () => Promise<T | undefined | false> | T | undefined | false, opts: WaitOptions = {}): Promise<T> {
  const { timeout = generousMs, what = "condition", on } = opts;
  const interval = opts.interval ?? (on ? 250 : 100);
  return new Promise<T>((resolve, reject) => {
    let settled = false;
    let checking = false;
    let again = false;
    let last: unknown;
    const finish = (fn: () => void) => {
      if (settled) return;
      settled = true;
      clearTimeout(deadline);
      clearInterval(poll);
      unsubscribe?.();
      fn();
    };
    // One check at a time; a change during a check asks for one more afterwards.
    const run = async () => {
      if (settled) return;
      if (checking) {
        again = true;
        return;
      }
      checking = true;
      try {
        do {
          again = false;
          try {
            const v = await check();
            if (v) return finish(() => resolve(v));
          } catch (err) {
            last = err;
          }
        } while (again && !settled);
      } finally {
        checking = false;
      }
    };
    const deadline = setTimeout(() => {
      const described = typeof what === "function" ? what() : what;
      finish(() =>
        reject(new Error(`timed out after ${timeout} ms waiting for ${described}${last ? `: ${(last as Error).message}` : ""}`)),
      );
    }, timeout);
    const poll = setInterval(() => void run(), interval);
    const unsubscribe = on?.subscribe(() => void run());
    void run();
  });
}

/** Text that grows (log lines, a process's output) and announces each addition. */
export class TextFeed implements Changes {
  private text = "";
  private readonly listeners = new Set<(chunk: string) => void>();

  append(chunk: string): void {
    this.text += chunk;
    for (const l of [...this.listeners]) l(chunk);
  }
  toString(): string {
    return this.text;
  }
  /** Calls `listener` with each addition. */
  subscribe(listener: (chunk: string) => void): () => void {
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
  }
  /** Resolves with the first match of `pattern` in the text so far or to come. */
  waitForMatch(pattern: RegExp, opts: Omit<WaitOptions, "on"> = {}): Promise<RegExpMatchArray> {
    return waitFor(() => this.text.match(pattern) ?? undefined, { what: String(pattern), ...opts, on: this });
  }
}

/** Changes of any of `sources`. */
export function anyOf(...sources: Changes[]): Changes {
  return {
    subscribe(listener) {
      const offs = sources.map((s) => s.subscribe(listener));
      return () => {
        for (const off of offs) off();
      };
    },
  };
}
