// Pure text formatting for the operator CLI: tables, ages, durations, byte sizes, progress bars.
// Nothing here does I/O, so it is unit-tested directly.
import { timestampDate, type Timestamp } from "@bufbuild/protobuf/wkt";

/**
 * Makes a server- or agent-supplied string safe to print on a terminal: control characters
 * (including ESC, so no terminal escape sequences) become "?". Node names, host facts and GPU
 * models come from agents and are not trusted.
 */
export function clean(text: string): string {
  // eslint-disable-next-line no-control-regex
  return text.replace(/[\u0000-\u001f\u007f-\u009f]/g, "?");
}

/**
 * A plain left-aligned table: a header row, then one row per entry, columns separated by two
 * spaces. The last column is not padded. Cells are cleaned of control characters.
 */
export function table(headers: string[], rows: string[][]): string {
  const all = [headers, ...rows].map((r) => headers.map((_, i) => clean(r[i] ?? "")));
  const widths = headers.map((_, i) => Math.max(...all.map((r) => [...r[i]!].length)));
  return `${all
    .map((r) =>
      r
        .map((cell, i) => (i === r.length - 1 ? cell : cell + " ".repeat(widths[i]! - [...cell].length)))
        .join("  ")
        .trimEnd(),
    )
    .join("\n")}\n`;
}

/** A secret the server answers only once, set apart on its own line so it is easy to copy. */
export function shownOnce(what: string, secret: string): string {
  return `${what} (shown once; it cannot be retrieved again):\n\n  ${clean(secret)}\n\n`;
}

/** "Key:  value" lines with the values aligned; entries with an undefined value are left out. */
export function fields(entries: [string, string | undefined][], indent = "  "): string {
  const shown = entries.filter((e): e is [string, string] => e[1] !== undefined);
  const width = Math.max(0, ...shown.map(([k]) => k.length + 1));
  return shown.map(([k, v]) => `${indent}${(`${k}:`).padEnd(width)}  ${clean(v)}\n`).join("");
}

const units: [string, number][] = [
  ["d", 86_400_000],
  ["h", 3_600_000],
  ["m", 60_000],
  ["s", 1000],
];

/**
 * A duration in at most two units, rounded down: 4s, 3m12s, 2h5m, 3d4h. Under a second: "<1s"
 * (or "0s" for exactly zero).
 */
export function formatDuration(ms: number): string {
  const abs = Math.abs(ms);
  if (abs === 0) return "0s";
  if (abs < 1000) return "<1s";
  const whole = Math.floor(abs / 1000) * 1000;
  const first = units.findIndex(([, size]) => whole >= size);
  const [bigName, bigSize] = units[first]!;
  const big = Math.floor(whole / bigSize);
  const next = units[first + 1];
  const small = next === undefined ? 0 : Math.floor((whole - big * bigSize) / next[1]);
  return small > 0 ? `${big}${bigName}${small}${next![0]}` : `${big}${bigName}`;
}

/** How long ago `when` was relative to `now`: "4s ago", "3m12s ago", "just now", "in 5m", "never". */
export function formatAge(when: Date | undefined, now: Date): string {
  if (when === undefined) return "never";
  const delta = now.getTime() - when.getTime();
  if (Math.abs(delta) < 1000) return "just now";
  return delta > 0 ? `${formatDuration(delta)} ago` : `in ${formatDuration(-delta)}`;
}

/** A timestamp message as a Date, or undefined when unset. */
export function dateOf(ts: Timestamp | undefined): Date | undefined {
  return ts === undefined ? undefined : timestampDate(ts);
}

/** UTC, to the second: 2024-05-01 12:00:03Z. */
export function formatTime(when: Date | undefined): string {
  if (when === undefined) return "-";
  return when
    .toISOString()
    .replace("T", " ")
    .replace(/\.\d{3}Z$/, "Z");
}

/** A time with its age: "2024-05-01 12:00:03Z (4s ago)"; "-" when unset. */
export function formatTimeAndAge(when: Date | undefined, now: Date): string {
  return when === undefined ? "-" : `${formatTime(when)} (${formatAge(when, now)})`;
}

const byteUnits = ["B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"];

/** Binary units: 0 B, 1023 B, 1.5 KiB, 80 GiB. One decimal below 10 units, none above. */
export function formatBytes(bytes: bigint | number): string {
  let value = typeof bytes === "bigint" ? Number(bytes) : bytes;
  if (!Number.isFinite(value) || value < 0) return String(bytes);
  let unit = 0;
  while (value >= 1024 && unit < byteUnits.length - 1) {
    value /= 1024;
    unit++;
  }
  if (unit === 0) return `${value} B`;
  const text = value < 10 ? (Math.floor(value * 10) / 10).toFixed(1) : String(Math.floor(value));
  return `${text} ${byteUnits[unit]}`;
}

/** A percentage with one decimal: 45.0%. */
export function formatPercent(p: number): string {
  return `${(Math.round(p * 10) / 10).toFixed(1)}%`;
}

/** A protobuf enum value's short lowercase name: Liveness.ONLINE -> "online"; unknown -> "unknown(7)". */
export function enumName(enumObject: Record<number, string>, value: number): string {
  const name = enumObject[value];
  return name === undefined ? `unknown(${value})` : name.toLowerCase();
}

/** Labels as "k=v,k2=v2", sorted by key; "-" when there are none. */
export function formatLabels(labels: Record<string, string>): string {
  const entries = Object.entries(labels).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
  return entries.length === 0 ? "-" : entries.map(([k, v]) => `${k}=${v}`).join(",");
}

export interface ProgressView {
  percent: number;
  bytesDone: bigint;
  bytesTotal: bigint;
  message: string;
}

/**
 * One line of progress: "[########------------]  40.0%  400 MiB / 1000 MiB  downloading". The
 * bar is `width` cells; percent is clamped to 0-100; bytes are shown when any are known.
 */
export function progressLine(p: ProgressView, width = 20): string {
  const pct = Math.min(100, Math.max(0, Number.isFinite(p.percent) ? p.percent : 0));
  const filled = Math.round((pct / 100) * width);
  const parts = [`[${"#".repeat(filled)}${"-".repeat(width - filled)}]`, formatPercent(pct).padStart(6)];
  if (p.bytesTotal > 0n) parts.push(`${formatBytes(p.bytesDone)} / ${formatBytes(p.bytesTotal)}`);
  else if (p.bytesDone > 0n) parts.push(formatBytes(p.bytesDone));
  if (p.message !== "") parts.push(clean(p.message));
  return parts.join("  ");
}
