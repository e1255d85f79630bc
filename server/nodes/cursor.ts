// Ordering rules for a node's sequenced streams (inventory, telemetry).
//
// Each sample carries the agent's persistent, strictly increasing sequence number and the agent's
// `observedAt`; the server adds its own `receivedAt`. The sequence decides whether a sample is new
// at all; the timestamps decide whether it may replace the last-good state. A bad node clock can
// therefore delay updates but never poison the stored state or wedge the stream.
//
// Pure: every instant is a parameter (epoch milliseconds).

export interface Sample {
  /** Agent-assigned, >= 1, strictly increasing per (node, stream). */
  sequence: bigint;
  /** When the agent observed it, by the agent's clock. */
  observedAt: number;
}

/** What `judgeSample` needs to know about a stream's cursor. */
export interface CursorPosition {
  /** Highest sequence accepted so far, applied or not. */
  sequence: bigint;
  /** `observedAt` of the last applied sample; null if none has been applied yet. */
  appliedObservedAt: number | null;
}

/** The stored cursor of one stream: what `advanceCursor` returns and takes back. */
export interface StreamCursor extends CursorPosition {
  /** Sequence of the sample whose state is current; null if none has been applied yet. */
  appliedSequence: bigint | null;
  /** Server time at which the latest sample (`sequence`) arrived, applied or not. */
  receivedAt: number;
  /** Why the latest sample did not replace the state; null once a sample applies again. */
  rejectionReason: string | null;
}

/** Accepted: the cursor advances. Only 'apply' also replaces the state. */
export type AdvancingVerdict = { kind: "apply" } | { kind: "future"; reason: string } | { kind: "older"; reason: string };

/** Refused: the cursor stays put. 'replay' answers aborted (409), 'invalid' invalid_argument (400). */
export type RefusingVerdict = { kind: "replay"; reason: string } | { kind: "invalid"; reason: string };

export type Verdict = AdvancingVerdict | RefusingVerdict;

// 3600000 -> "3600s", 300001 -> "300.001s".
function seconds(ms: number): string {
  return `${Math.round(ms) / 1000}s`;
}

/**
 * Judge one sample against the stream's cursor (null before the first sample ever).
 *
 * Checks run in this order, and the order matters:
 * 1. invalid: a malformed sample (sequence < 1, non-finite observedAt) is refused whatever the
 *    cursor says.
 * 2. replay: sequence <= cursor.sequence. Checked before any timestamp so that a replay is
 *    refused (409) and never advances the cursor, whatever its clock says.
 * 3. future: observedAt > receivedAt + maxFutureSkewMs (exactly at the limit is fine). Checked
 *    before 'older' because it names the actual fault, a node clock running ahead.
 * 4. older: observedAt < the last applied observedAt (equal is fine: a clock that did not tick).
 * 5. apply.
 * Gaps in the sequence are normal (samples lost or not sent) and are not an error.
 */
export function judgeSample(cursor: CursorPosition | null, sample: Sample, receivedAt: number, maxFutureSkewMs: number): Verdict {
  if (sample.sequence < 1n) {
    return { kind: "invalid", reason: `sequence must be 1 or more, got ${sample.sequence}` };
  }
  if (!Number.isFinite(sample.observedAt)) {
    return { kind: "invalid", reason: "observation time is missing or not a number" };
  }
  if (cursor !== null && sample.sequence <= cursor.sequence) {
    return {
      kind: "replay",
      reason: `sequence ${sample.sequence} already seen (stream is at ${cursor.sequence})`,
    };
  }
  const ahead = sample.observedAt - receivedAt;
  if (ahead > maxFutureSkewMs) {
    return {
      kind: "future",
      reason: `observation ${seconds(ahead)} ahead of the server clock (limit ${seconds(maxFutureSkewMs)})`,
    };
  }
  const applied = cursor?.appliedObservedAt ?? null;
  if (applied !== null && sample.observedAt < applied) {
    return {
      kind: "older",
      reason: `observation ${seconds(applied - sample.observedAt)} older than the last applied one`,
    };
  }
  return { kind: "apply" };
}

/**
 * The cursor after accepting `sample` with an advancing verdict from `judgeSample`. 'future' and
 * 'older' move the sequence on but keep the applied state and record the reason, which stays
 * visible until a later sample applies.
 *
 * Throws for a refused verdict, or for a sample that does not move the sequence forward: a
 * caller must answer those without touching the cursor.
 */
export function advanceCursor(cursor: StreamCursor | null, sample: Sample, verdict: AdvancingVerdict, receivedAt: number): StreamCursor {
  const kind = (verdict as Verdict).kind;
  if (kind === "replay" || kind === "invalid") {
    throw new Error(`advanceCursor called with a '${kind}' verdict; the cursor must not move`);
  }
  if (sample.sequence < 1n || (cursor !== null && sample.sequence <= cursor.sequence)) {
    throw new Error(`advanceCursor: sequence ${sample.sequence} does not advance the cursor`);
  }
  if (verdict.kind === "apply") {
    return {
      sequence: sample.sequence,
      appliedSequence: sample.sequence,
      appliedObservedAt: sample.observedAt,
      receivedAt,
      rejectionReason: null,
    };
  }
  return {
    sequence: sample.sequence,
    appliedSequence: cursor?.appliedSequence ?? null,
    appliedObservedAt: cursor?.appliedObservedAt ?? null,
    receivedAt,
    rejectionReason: verdict.reason,
  };
}
