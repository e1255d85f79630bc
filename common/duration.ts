// Durations in configuration: "250ms", "10s", "5m", "2h", "30d".
const units: Record<string, number> = { ms: 1, s: 1000, m: 60_000, h: 3_600_000, d: 86_400_000 };

export function parseDuration(text: string): number {
  const m = /^(\d+(?:\.\d+)?)(ms|s|m|h|d)$/.exec(text.trim());
  if (!m) throw new Error(`expected a duration such as 250ms, 10s, 5m, 2h or 30d, got "${text}"`);
  const ms = Number(m[1]) * units[m[2]!]!;
  if (!Number.isFinite(ms) || ms <= 0) throw new Error(`expected a positive duration, got "${text}"`);
  return Math.round(ms);
}
