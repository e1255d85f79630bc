// Small formatters shared by the pages.
import { timestampDate, type Timestamp } from "@bufbuild/protobuf/wkt";
import { Liveness } from "../../gen/proto/modelforge/common/v1/common_pb.js";

export function livenessName(l: Liveness): string {
  return (Liveness[l] ?? "unknown").toLowerCase();
}

/** "LEASED" -> "leased" for any generated enum. */
export function enumText(e: Record<number, string>, v: number): string {
  return (e[v] ?? String(v)).toLowerCase();
}

export function time(t: Timestamp | undefined): string {
  return t === undefined
    ? "-"
    : timestampDate(t)
        .toISOString()
        .replace("T", " ")
        .replace(/\.\d+Z$/, "Z");
}

export function age(t: Timestamp | undefined, now = Date.now()): string {
  if (t === undefined) return "never";
  const s = Math.max(0, Math.round((now - timestampDate(t).getTime()) / 1000));
  if (s < 60) return `${s}s ago`;
  if (s < 3600) return `${Math.floor(s / 60)}m ago`;
  if (s < 86400) return `${Math.floor(s / 3600)}h ago`;
  return `${Math.floor(s / 86400)}d ago`;
}

/** A time known to the minute (the start of one, as a key's last use is): "never", "this minute", else its age. */
export function minuteAge(t: Timestamp | undefined, now = Date.now()): string {
  if (t === undefined) return "never";
  return now - timestampDate(t).getTime() < 60_000 ? "this minute" : age(t, now);
}

export function bytes(n: bigint | number): string {
  let v = Number(n);
  for (const unit of ["B", "KiB", "MiB", "GiB", "TiB"]) {
    if (v < 1024 || unit === "TiB") return `${unit === "B" ? v : v.toFixed(1)} ${unit}`;
    v /= 1024;
  }
  return `${v} B`;
}

export function labels(l: Record<string, string>): string {
  const entries = Object.entries(l);
  return entries.length === 0 ? "-" : entries.map(([k, v]) => `${k}=${v}`).join(", ");
}

/** "rack=r7, zone=a" (commas or new lines) -> { rack: "r7", zone: "a" }. */
export function parseLabels(text: string): Record<string, string> {
  const out: Record<string, string> = {};
  for (const part of text.split(/[,\n]/)) {
    const p = part.trim();
    if (p === "") continue;
    const i = p.indexOf("=");
    if (i <= 0) throw new Error(`label "${p}": expected KEY=VALUE`);
    out[p.slice(0, i).trim()] = p.slice(i + 1).trim();
  }
  return out;
}

/** "10m", "2h", "90s", "7d" -> seconds. */
export function parseDurationSeconds(text: string): bigint {
  const m = /^(\d+)(s|m|h|d)$/.exec(text.trim());
  if (m === null) throw new Error(`duration "${text}": expected a number and s, m, h or d`);
  return BigInt(m[1]!) * BigInt({ s: 1, m: 60, h: 3600, d: 86400 }[m[2] as "s" | "m" | "h" | "d"]);
}

/** A replica's assigned GPUs as "0 (GPU-aaaa), 1 (GPU-bbbb)" by nvidia-smi index; "-" for a CPU replica. */
export function gpusText(gpus: readonly { index: number; uuid: string }[]): string {
  return gpus.length === 0 ? "-" : gpus.map((g) => `${g.index} (${g.uuid})`).join(", ");
}
