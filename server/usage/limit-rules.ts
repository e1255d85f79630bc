// A service key's limits, pure: requests and tokens per minute, tokens per UTC day and month.
// A request reserves an upper bound of what it can use before it is routed (its body's bytes bound
// its prompt's tokens, and max_tokens its completion) and settles what it really used when it
// ends, so a request admitted against the shared counters never takes a token limit past itself.

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

/** A request as its limits see it: the checked body, and its length in bytes as it goes to the runtime. */
export interface LimitedRequest {
  body: Record<string, unknown>;
  bodyBytes: number;
}

/**
 * What a request reserves: at most its prompt's tokens plus at most its completion's. Every
 * tokenizer served here makes a token of at least one byte of the text it renders (byte-level BPE,
 * SentencePiece with byte fallback), and every byte of prompt text, chat message or tool comes in
 * the body, whose JSON framing also covers the tokens a chat template adds per message; so the
 * body's bytes bound the prompt. The completion: max_tokens (at most `mostCompletion`), else the
 * OpenAI default of 16.
 */
export function reservationOf(request: LimitedRequest, mostCompletion: number): number {
  const { body } = request;
  const asked = body.max_tokens ?? body.max_completion_tokens;
  const completion = typeof asked === "number" && Number.isSafeInteger(asked) && asked > 0 ? Math.min(asked, mostCompletion) : 16;
  return Math.max(0, request.bodyBytes) + completion;
}

/** The refusal's words: what was reached, in the caller's terms. */
export function refusalText(kind: LimitKind, limits: KeyLimits, reserved: number): string {
  const limit = limits[kind] ?? 0;
  if (kind !== "rpm" && reserved > limit) {
    const per = kind === "tpm" ? "per minute" : kind === "dailyTokens" ? "per day" : "per month";
    return `this request may use up to ${reserved} tokens (its body's bytes bound its prompt, plus max_tokens), more than this key's ${limit} tokens ${per}: send a shorter request`;
  }
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
