import { describe, expect, it } from "vitest";
import {
  advanceCursor,
  judgeSample,
  type AdvancingVerdict,
  type Sample,
  type StreamCursor,
  type Verdict,
} from "../../../server/nodes/cursor.js";

const NOW = 1_800_000_000_000;
const S = 1000;
const HOUR = 3600 * S;
const SKEW = 300 * S; // the default five minutes

// A cursor whose last sample (sequence 5) applied, observed 10 s before NOW.
const AT_5: StreamCursor = {
  sequence: 5n,
  appliedSequence: 5n,
  appliedObservedAt: NOW - 10 * S,
  receivedAt: NOW - 10 * S,
  rejectionReason: null,
};
const BIG = 2n ** 53n + 10n; // beyond Number.MAX_SAFE_INTEGER

describe("judgeSample", () => {
  it.each<[string, StreamCursor | null, Sample, Verdict]>([
    ["first sample ever", null, { sequence: 1n, observedAt: NOW }, { kind: "apply" }],
    ["first sample need not be sequence 1", null, { sequence: 42n, observedAt: NOW }, { kind: "apply" }],
    ["normal advance", AT_5, { sequence: 6n, observedAt: NOW }, { kind: "apply" }],
    ["gap: sequence jumps by 10", AT_5, { sequence: 15n, observedAt: NOW }, { kind: "apply" }],
    [
      "replay of the same sequence",
      AT_5,
      { sequence: 5n, observedAt: NOW },
      { kind: "replay", reason: "sequence 5 already seen (stream is at 5)" },
    ],
    [
      "replay of a lower sequence",
      AT_5,
      { sequence: 3n, observedAt: NOW },
      { kind: "replay", reason: "sequence 3 already seen (stream is at 5)" },
    ],
    [
      "replay wins over a future observation",
      AT_5,
      { sequence: 5n, observedAt: NOW + HOUR },
      { kind: "replay", reason: "sequence 5 already seen (stream is at 5)" },
    ],
    [
      "node clock one hour ahead",
      AT_5,
      { sequence: 6n, observedAt: NOW + HOUR },
      { kind: "future", reason: "observation 3600s ahead of the server clock (limit 300s)" },
    ],
    [
      "first sample ever from a clock one hour ahead",
      null,
      { sequence: 1n, observedAt: NOW + HOUR },
      { kind: "future", reason: "observation 3600s ahead of the server clock (limit 300s)" },
    ],
    ["ahead exactly at the limit", AT_5, { sequence: 6n, observedAt: NOW + SKEW }, { kind: "apply" }],
    [
      "ahead 1 ms beyond the limit",
      AT_5,
      { sequence: 6n, observedAt: NOW + SKEW + 1 },
      { kind: "future", reason: "observation 300.001s ahead of the server clock (limit 300s)" },
    ],
    [
      "node clock one hour behind the last applied observation",
      AT_5,
      { sequence: 6n, observedAt: AT_5.appliedObservedAt! - HOUR },
      { kind: "older", reason: "observation 3600s older than the last applied one" },
    ],
    ["behind by exactly zero (same observation time)", AT_5, { sequence: 6n, observedAt: AT_5.appliedObservedAt! }, { kind: "apply" }],
    [
      "behind by 1 ms",
      AT_5,
      { sequence: 6n, observedAt: AT_5.appliedObservedAt! - 1 },
      { kind: "older", reason: "observation 0.001s older than the last applied one" },
    ],
    [
      "an old observation with nothing applied yet is not older",
      { ...AT_5, appliedSequence: null, appliedObservedAt: null },
      { sequence: 6n, observedAt: NOW - HOUR },
      { kind: "apply" },
    ],
    ["sequence 0", null, { sequence: 0n, observedAt: NOW }, { kind: "invalid", reason: "sequence must be 1 or more, got 0" }],
    [
      "negative sequence, even against a cursor (invalid before replay)",
      AT_5,
      { sequence: -1n, observedAt: NOW },
      { kind: "invalid", reason: "sequence must be 1 or more, got -1" },
    ],
    [
      "observation time not a number",
      AT_5,
      { sequence: 6n, observedAt: Number.NaN },
      { kind: "invalid", reason: "observation time is missing or not a number" },
    ],
    ["bigint sequence beyond 2^53", { ...AT_5, sequence: BIG }, { sequence: BIG + 1n, observedAt: NOW }, { kind: "apply" }],
    [
      "bigint replay beyond 2^53 (would be equal as a number)",
      { ...AT_5, sequence: BIG + 1n },
      { sequence: BIG, observedAt: NOW },
      { kind: "replay", reason: `sequence ${BIG} already seen (stream is at ${BIG + 1n})` },
    ],
  ])("%s", (_name, cursor, sample, expected) => {
    expect(judgeSample(cursor, sample, NOW, SKEW)).toEqual(expected);
  });
});

// Feed samples (each with its server receive time) through judge + advance, as the caller would.
function feed(steps: Array<[Sample, number]>): { verdicts: Verdict["kind"][]; cursor: StreamCursor | null } {
  let cursor: StreamCursor | null = null;
  const verdicts: Verdict["kind"][] = [];
  for (const [sample, receivedAt] of steps) {
    const verdict = judgeSample(cursor, sample, receivedAt, SKEW);
    verdicts.push(verdict.kind);
    if (verdict.kind === "replay" || verdict.kind === "invalid") continue; // caller answers 409/400
    cursor = advanceCursor(cursor, sample, verdict, receivedAt);
  }
  return { verdicts, cursor };
}

describe("judgeSample + advanceCursor over a stream", () => {
  it.each<[string, Array<[Sample, number]>, Verdict["kind"][], StreamCursor]>([
    [
      "first sample",
      [[{ sequence: 1n, observedAt: NOW - 1 }, NOW]],
      ["apply"],
      { sequence: 1n, appliedSequence: 1n, appliedObservedAt: NOW - 1, receivedAt: NOW, rejectionReason: null },
    ],
    [
      "normal advance with a gap",
      [
        [{ sequence: 1n, observedAt: NOW }, NOW],
        [{ sequence: 11n, observedAt: NOW + 10 * S }, NOW + 10 * S],
      ],
      ["apply", "apply"],
      { sequence: 11n, appliedSequence: 11n, appliedObservedAt: NOW + 10 * S, receivedAt: NOW + 10 * S, rejectionReason: null },
    ],
    [
      "a replay leaves the cursor untouched",
      [
        [{ sequence: 1n, observedAt: NOW }, NOW],
        [{ sequence: 1n, observedAt: NOW + S }, NOW + S],
      ],
      ["apply", "replay"],
      { sequence: 1n, appliedSequence: 1n, appliedObservedAt: NOW, receivedAt: NOW, rejectionReason: null },
    ],
    [
      "a future sample advances the cursor, keeps the state, records why",
      [
        [{ sequence: 1n, observedAt: NOW }, NOW],
        [{ sequence: 2n, observedAt: NOW + S + HOUR }, NOW + S],
      ],
      ["apply", "future"],
      {
        sequence: 2n,
        appliedSequence: 1n,
        appliedObservedAt: NOW,
        receivedAt: NOW + S,
        rejectionReason: "observation 3600s ahead of the server clock (limit 300s)",
      },
    ],
    [
      "the reason stays while the clock is still wrong",
      [
        [{ sequence: 1n, observedAt: NOW }, NOW],
        [{ sequence: 2n, observedAt: NOW + S + HOUR }, NOW + S],
        [{ sequence: 3n, observedAt: NOW + 2 * S - HOUR }, NOW + 2 * S],
      ],
      ["apply", "future", "older"],
      {
        sequence: 3n,
        appliedSequence: 1n,
        appliedObservedAt: NOW,
        receivedAt: NOW + 2 * S,
        rejectionReason: "observation 3598s older than the last applied one",
      },
    ],
    [
      "recovery: after a future sample a later good one applies and clears the reason",
      [
        [{ sequence: 1n, observedAt: NOW }, NOW],
        [{ sequence: 2n, observedAt: NOW + S + HOUR }, NOW + S],
        [{ sequence: 3n, observedAt: NOW + 2 * S }, NOW + 2 * S],
      ],
      ["apply", "future", "apply"],
      { sequence: 3n, appliedSequence: 3n, appliedObservedAt: NOW + 2 * S, receivedAt: NOW + 2 * S, rejectionReason: null },
    ],
    [
      "a future first sample leaves nothing applied",
      [[{ sequence: 1n, observedAt: NOW + HOUR }, NOW]],
      ["future"],
      {
        sequence: 1n,
        appliedSequence: null,
        appliedObservedAt: null,
        receivedAt: NOW,
        rejectionReason: "observation 3600s ahead of the server clock (limit 300s)",
      },
    ],
    [
      "bigint sequences beyond 2^53",
      [
        [{ sequence: BIG, observedAt: NOW }, NOW],
        [{ sequence: BIG + 1n, observedAt: NOW + S }, NOW + S],
        [{ sequence: BIG + 1n, observedAt: NOW + 2 * S }, NOW + 2 * S],
      ],
      ["apply", "apply", "replay"],
      { sequence: BIG + 1n, appliedSequence: BIG + 1n, appliedObservedAt: NOW + S, receivedAt: NOW + S, rejectionReason: null },
    ],
  ])("%s", (_name, steps, verdicts, cursor) => {
    expect(feed(steps)).toEqual({ verdicts, cursor });
  });
});

describe("advanceCursor refuses what must not move the cursor", () => {
  it.each<[string, Verdict, Sample]>([
    ["a replay verdict", { kind: "replay", reason: "x" }, { sequence: 6n, observedAt: NOW }],
    ["an invalid verdict", { kind: "invalid", reason: "x" }, { sequence: 6n, observedAt: NOW }],
    ["an apply verdict for a replayed sequence", { kind: "apply" }, { sequence: 5n, observedAt: NOW }],
  ])("%s", (_name, verdict, sample) => {
    expect(() => advanceCursor(AT_5, sample, verdict as AdvancingVerdict, NOW)).toThrow();
  });
});
