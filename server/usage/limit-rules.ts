// A service key's limits, pure: requests and tokens per minute, tokens per UTC day and month.
// A request reserves its max_tokens before it is routed and settles what it really used when it
// ends, so completion tokens never overshoot a limit; prompt tokens are known only at the end, so a
// token limit can be passed by at most the prompts of the requests in flight when it was reached.

export interface KeyLimits {
  rpm: number | null;
  tpm: number | null;
  dailyTokens: number | null;
  monthlyTokens: number | null;
}

export interface Spend {
  minuteStart: number;
  minuteRequests: number;
  minuteTokens: number;
  dayStart: number;
  dayTokens: number;
  monthStart: number;
  monthTokens: number;
}

export type LimitKind = "rpm" | "tpm" | "dailyTokens" | "monthlyTokens";

export type Admission = { admitted: true; spend: Spend } | { admitted: false; kind: LimitKind; retryAfterS: number };

export const hasLimits = (l: KeyLimits): boolean => l.rpm !== null || l.tpm !== null || l.dailyTokens !== null || l.monthlyTokens !== null;

const minuteMs = 60_000;
const dayMs = 86_400_000;
const startOfMinute = (now: number) => Math.floor(now / minuteMs) * minuteMs;
const startOfDay = (now: number) => Math.floor(now / dayMs) * dayMs;
function startOfMonth(now: number): number {
  const d = new Date(now);
  return Date.UTC(d.getUTCFullYear(), d.getUTCMonth(), 1);
}
function startOfNextMonth(now: number): number {
  const d = new Date(now);
  return Date.UTC(d.getUTCFullYear(), d.getUTCMonth() + 1, 1);
}

/** The spend rolled to the windows `now` falls in: a window that has passed starts again at zero. */
export function current(spend: Spend | undefined, now: number): Spend {
  const minute = startOfMinute(now);
  const day = startOfDay(now);
  const month = startOfMonth(now);
  return {
    minuteStart: minute,
    minuteRequests: spend?.minuteStart === minute ? spend.minuteRequests : 0,
    minuteTokens: spend?.minuteStart === minute ? spend.minuteTokens : 0,
    dayStart: day,
    dayTokens: spend?.dayStart === day ? spend.dayTokens : 0,
    monthStart: month,
    monthTokens: spend?.monthStart === month ? spend.monthTokens : 0,
  };
}

/** Admits one request reserving `reserve` tokens, or says which limit refuses it and for how long. */
export function admit(limits: KeyLimits, spend: Spend | undefined, reserve: number, now: number): Admission {
  const s = current(spend, now);
  const untilMinute = Math.ceil((s.minuteStart + minuteMs - now) / 1000);
  if (limits.monthlyTokens !== null && s.monthTokens + reserve > limits.monthlyTokens) {
    return { admitted: false, kind: "monthlyTokens", retryAfterS: Math.ceil((startOfNextMonth(now) - now) / 1000) };
  }
  if (limits.dailyTokens !== null && s.dayTokens + reserve > limits.dailyTokens) {
    return { admitted: false, kind: "dailyTokens", retryAfterS: Math.ceil((s.dayStart + dayMs - now) / 1000) };
  }
  if (limits.rpm !== null && s.minuteRequests + 1 > limits.rpm) return { admitted: false, kind: "rpm", retryAfterS: untilMinute };
  if (limits.tpm !== null && s.minuteTokens + reserve > limits.tpm) return { admitted: false, kind: "tpm", retryAfterS: untilMinute };
  return {
    admitted: true,
    spend: {
      ...s,
      minuteRequests: s.minuteRequests + 1,
      minuteTokens: s.minuteTokens + reserve,
      dayTokens: s.dayTokens + reserve,
      monthTokens: s.monthTokens + reserve,
    },
  };
}

/**
 * A finished request's tokens replace its reservation, in the windows it was admitted in that are
 * still current (a window that has passed since keeps what it had).
 */
export function settle(spend: Spend | undefined, admittedAt: number, reserved: number, used: number, now: number): Spend {
  const s = current(spend, now);
  const delta = used - reserved;
  const same = (start: number, of: (t: number) => number) => start === of(admittedAt);
  return {
    ...s,
    minuteTokens: Math.max(0, s.minuteTokens + (same(s.minuteStart, startOfMinute) ? delta : 0)),
    dayTokens: Math.max(0, s.dayTokens + (same(s.dayStart, startOfDay) ? delta : 0)),
    monthTokens: Math.max(0, s.monthTokens + (same(s.monthStart, startOfMonth) ? delta : 0)),
  };
}

/** What a request reserves: its max_tokens (bounded), else the OpenAI default of 16. */
export function reservationOf(body: Record<string, unknown>, most: number): number {
  const asked = body.max_tokens ?? body.max_completion_tokens;
  return typeof asked === "number" && Number.isSafeInteger(asked) && asked > 0 ? Math.min(asked, most) : 16;
}

/** The refusal's words: what was reached, in the caller's terms. */
export function refusalText(kind: LimitKind, limits: KeyLimits): string {
  switch (kind) {
    case "rpm":
      return `this key's limit of ${limits.rpm} requests per minute is reached`;
    case "tpm":
      return `this key's limit of ${limits.tpm} tokens per minute is reached`;
    case "dailyTokens":
      return `this key's quota of ${limits.dailyTokens} tokens per day is used up`;
    case "monthlyTokens":
      return `this key's quota of ${limits.monthlyTokens} tokens per month is used up`;
  }
}
