// A rollout request's settings, checked and defaulted: pure, with typed errors.
import type { Duration } from "@bufbuild/protobuf/wkt";
import { Code, ConnectError } from "@connectrpc/connect";

export const DEFAULT_BATCH_PERCENT = 10;
export const DEFAULT_BATCH_DEADLINE_MS = 10 * 60_000;
/** Pauses and deadlines beyond a day are a mistake more likely than a plan. */
const MAX_WAIT_MS = 24 * 3_600_000;

export interface RolloutSettings {
  batchPercent: number;
  pauseBetweenMs: number;
  batchDeadlineMs: number;
}

function msOf(d: Duration | undefined, field: string, fallback: number): number {
  if (d === undefined) return fallback;
  const ms = Number(d.seconds) * 1000 + Math.round(d.nanos / 1e6);
  if (!Number.isFinite(ms) || ms < 0 || ms > MAX_WAIT_MS) {
    throw new ConnectError(`${field}: must be from 0 to 24h`, Code.InvalidArgument);
  }
  return ms;
}

export function rolloutSettings(req: { batchPercent: number; pauseBetween?: Duration; batchDeadline?: Duration }): RolloutSettings {
  const batchPercent = req.batchPercent === 0 ? DEFAULT_BATCH_PERCENT : req.batchPercent;
  if (batchPercent < 1 || batchPercent > 100) throw new ConnectError("batch_percent: must be from 1 to 100", Code.InvalidArgument);
  const batchDeadlineMs = msOf(req.batchDeadline, "batch_deadline", DEFAULT_BATCH_DEADLINE_MS);
  if (batchDeadlineMs === 0) throw new ConnectError("batch_deadline: must be positive", Code.InvalidArgument);
  return { batchPercent, pauseBetweenMs: msOf(req.pauseBetween, "pause_between", 0), batchDeadlineMs };
}

/** The platform a node's agent runs on, from its inventory's architecture (os.arch() names). */
export function platformOf(host: unknown): string | undefined {
  const arch = host !== null && typeof host === "object" ? (host as { architecture?: unknown }).architecture : undefined;
  if (typeof arch !== "string" || arch === "") return undefined;
  const names: Record<string, string> = { x86_64: "x64", amd64: "x64", aarch64: "arm64" };
  return `linux-${names[arch] ?? arch}`;
}
