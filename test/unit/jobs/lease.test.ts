import { describe, expect, it } from "vitest";
import {
  afterFailure,
  afterLeaseExpiry,
  checkReport,
  claimLease,
  DEFAULT_LEASE_DURATION_MS,
  isLeaseLive,
  leaseExpiry,
  nextLeasable,
  type JobRecord,
  type JobState,
  type LeaseCandidate,
} from "../../../server/jobs/lease.js";

const T0 = Date.UTC(2026, 10, 1, 12, 0, 0);
const EXP = T0 + DEFAULT_LEASE_DURATION_MS;

function job(over: Partial<JobRecord> = {}): JobRecord {
  return {
    state: "leased",
    attempt: 2,
    maxAttempts: 5,
    leaseExpiresAt: EXP,
    cancelRequested: false,
    orderingKey: null,
    seq: 1n,
    ...over,
  };
}

describe("leaseExpiry", () => {
  it("adds the duration", () => {
    expect(leaseExpiry(T0, 120_000)).toBe(T0 + 120_000);
    expect(leaseExpiry(T0, 1)).toBe(T0 + 1);
  });
  it.each([0, -1, Number.NaN, Number.POSITIVE_INFINITY])("refuses duration %s", (d) => {
    expect(() => leaseExpiry(T0, d)).toThrow(RangeError);
  });
});

describe("checkReport", () => {
  it.each<[string, Partial<JobRecord>, number, number]>([
    ["current attempt, long before expiry", {}, 2, T0],
    ["current attempt, 1 ms before expiry", {}, 2, EXP - 1],
    ["cancel requested but lease live", { cancelRequested: true }, 2, T0],
    ["first attempt", { attempt: 1 }, 1, T0],
  ])("accepts: %s", (_label, over, attempt, now) => {
    expect(checkReport(job(over), attempt, now)).toEqual({ ok: true });
  });

  it.each<[string, Partial<JobRecord>, number, number, "aborted" | "failed_precondition", RegExp]>([
    ["stale attempt", {}, 1, T0, "aborted", /^lease lost: stop work \(attempt 1 is stale; current attempt is 2\)$/],
    ["stale attempt after expiry", {}, 1, EXP + 10, "aborted", /attempt 1 is stale/],
    ["exactly at expiry (now == expiresAt is expired)", {}, 2, EXP, "aborted", /^lease lost: stop work \(.*expired 0 ms ago/],
    ["expired by 1 ms", {}, 2, EXP + 1, "aborted", /^lease lost: stop work \(.*expired 1 ms ago/],
    ["lease without expiry", { leaseExpiresAt: null }, 2, T0, "aborted", /^lease lost: stop work \(lease has no expiry/],
    [
      "job back to pending",
      { state: "pending", leaseExpiresAt: null },
      2,
      T0,
      "aborted",
      /^lease lost: stop work \(job is pending, not leased\)$/,
    ],
    ["job succeeded", { state: "succeeded" }, 2, T0, "aborted", /^lease lost: stop work \(job already succeeded\)$/],
    ["job failed", { state: "failed" }, 2, T0, "aborted", /^lease lost: stop work \(job already failed\)$/],
    ["job cancelled", { state: "cancelled" }, 2, T0, "aborted", /^lease lost: stop work \(job already cancelled\)$/],
    ["finished wins over a future attempt", { state: "succeeded" }, 9, T0, "aborted", /job already succeeded/],
    ["attempt never issued", {}, 3, T0, "failed_precondition", /attempt 3 was never issued/],
    ["attempt 0", {}, 0, T0, "failed_precondition", /positive integer/],
    ["fractional attempt", {}, 1.5, T0, "failed_precondition", /positive integer/],
    ["first lease not yet issued", { state: "pending", attempt: 0, leaseExpiresAt: null }, 1, T0, "failed_precondition", /never issued/],
  ])("refuses: %s", (_label, over, attempt, now, code, reason) => {
    const result = checkReport(job(over), attempt, now);
    expect(result.ok).toBe(false);
    if (result.ok) return;
    expect(result.code).toBe(code);
    expect(result.reason).toMatch(reason);
  });

  it("agrees with isLeaseLive at the boundary", () => {
    const j = job();
    for (const now of [EXP - 1, EXP, EXP + 1]) {
      expect(checkReport(j, 2, now).ok).toBe(isLeaseLive(j, now));
    }
    expect(isLeaseLive(j, EXP - 1)).toBe(true);
    expect(isLeaseLive(j, EXP)).toBe(false);
  });
});

describe("afterLeaseExpiry", () => {
  it.each<[string, Partial<JobRecord>, number, ReturnType<typeof afterLeaseExpiry>]>([
    ["live lease: nothing to do", {}, EXP - 1, null],
    ["not leased: nothing to do", { state: "pending", leaseExpiresAt: null }, EXP + 1, null],
    ["finished: nothing to do", { state: "succeeded" }, EXP + 1, null],
    ["exactly at expiry: retried", {}, EXP, { state: "pending" }],
    ["expired by 1 ms: retried", {}, EXP + 1, { state: "pending" }],
    ["leased without expiry counts as lapsed", { leaseExpiresAt: null }, T0, { state: "pending" }],
    ["last attempt but one: retried", { attempt: 4 }, EXP, { state: "pending" }],
    [
      "last attempt: exhausted",
      { attempt: 5 },
      EXP,
      {
        state: "failed",
        failure: { code: "ATTEMPTS_EXHAUSTED", message: "lease expired on attempt 5 of 5: attempts exhausted", retryable: false },
      },
    ],
    [
      "single-attempt job",
      { attempt: 1, maxAttempts: 1 },
      EXP + 1,
      {
        state: "failed",
        failure: { code: "ATTEMPTS_EXHAUSTED", message: "lease expired on attempt 1 of 1: attempts exhausted", retryable: false },
      },
    ],
    [
      "cancel requested: cancelled, even with attempts left",
      { cancelRequested: true },
      EXP,
      {
        state: "cancelled",
        failure: { code: "CANCELLED", message: "cancelled by operator; lease expired on attempt 2 of 5", retryable: false },
      },
    ],
    [
      "cancel requested on the last attempt: cancelled, not exhausted",
      { cancelRequested: true, attempt: 5 },
      EXP,
      {
        state: "cancelled",
        failure: { code: "CANCELLED", message: "cancelled by operator; lease expired on attempt 5 of 5", retryable: false },
      },
    ],
    ["cancel requested, lease still live: nothing yet", { cancelRequested: true }, EXP - 1, null],
  ])("%s", (_label, over, now, expected) => {
    expect(afterLeaseExpiry(job(over), now)).toEqual(expected);
  });
});

describe("afterFailure", () => {
  it.each<[string, Partial<JobRecord>, boolean, { state: "pending" | "failed"; willRetry: boolean }]>([
    ["retryable with attempts left", { attempt: 1 }, true, { state: "pending", willRetry: true }],
    ["retryable, one attempt left", { attempt: 4 }, true, { state: "pending", willRetry: true }],
    ["retryable on the last attempt", { attempt: 5 }, true, { state: "failed", willRetry: false }],
    ["not retryable", { attempt: 1 }, false, { state: "failed", willRetry: false }],
    ["retryable but cancel requested", { attempt: 1, cancelRequested: true }, true, { state: "failed", willRetry: false }],
  ])("%s", (_label, over, retryable, expected) => {
    expect(afterFailure(job(over), { retryable })).toEqual(expected);
  });
});

describe("claimLease", () => {
  it("issues the next attempt with a fresh expiry", () => {
    expect(claimLease(job({ state: "pending", attempt: 0, leaseExpiresAt: null }), T0)).toEqual({
      state: "leased",
      attempt: 1,
      leaseExpiresAt: T0 + DEFAULT_LEASE_DURATION_MS,
    });
    expect(claimLease(job({ state: "pending", attempt: 4, leaseExpiresAt: null }), T0, 1000).attempt).toBe(5);
  });
  it.each<[string, Partial<JobRecord>]>([
    ["leased", {}],
    ["finished", { state: "failed" }],
    ["cancel requested", { state: "pending", cancelRequested: true }],
    ["exhausted", { state: "pending", attempt: 5 }],
  ])("refuses a %s job", (_label, over) => {
    expect(() => claimLease(job(over), T0)).toThrow();
  });
});

describe("nextLeasable", () => {
  function c(id: string, seq: number, state: JobState, orderingKey: string | null = null, over: Partial<JobRecord> = {}): LeaseCandidate {
    const leaseExpiresAt = state === "leased" ? EXP : null;
    return { ...job({ state, seq: BigInt(seq), orderingKey, leaseExpiresAt, ...over }), id };
  }

  it.each<[string, LeaseCandidate[], string[]]>([
    ["nothing", [], []],
    ["unkeyed pending jobs, all eligible in seq order", [c("b", 2, "pending"), c("a", 1, "pending")], ["a", "b"]],
    ["unkeyed leased job blocks nothing", [c("a", 1, "leased"), c("b", 2, "pending")], ["b"]],
    [
      "keyed: only the earliest pending",
      [c("k2", 2, "pending", "dep-1"), c("k1", 1, "pending", "dep-1"), c("k3", 3, "pending", "dep-1")],
      ["k1"],
    ],
    ["keyed: a leased head blocks the key", [c("k1", 1, "leased", "dep-1"), c("k2", 2, "pending", "dep-1")], []],
    ["keyed: a leased later job blocks the key too", [c("k1", 1, "pending", "dep-1"), c("k2", 2, "leased", "dep-1")], []],
    [
      "keyed: finished jobs are ignored",
      [c("k1", 1, "succeeded", "dep-1"), c("k2", 2, "failed", "dep-1"), c("k3", 3, "pending", "dep-1"), c("k4", 4, "pending", "dep-1")],
      ["k3"],
    ],
    [
      "keys are independent",
      [c("a1", 1, "leased", "A"), c("b1", 2, "pending", "B"), c("a2", 3, "pending", "A"), c("b2", 4, "pending", "B")],
      ["b1"],
    ],
    [
      "mixed keyed and unkeyed, result in seq order",
      [
        c("u5", 5, "pending"),
        c("a2", 2, "pending", "A"),
        c("b3", 3, "cancelled", "B"),
        c("b4", 4, "pending", "B"),
        c("u1", 1, "pending"),
        c("a6", 6, "pending", "A"),
      ],
      ["u1", "a2", "b4", "u5"],
    ],
    ["empty key means no key", [c("x", 1, "pending", ""), c("y", 2, "pending", "")], ["x", "y"]],
    [
      "cancel-requested unkeyed pending job is not leased",
      [c("a", 1, "pending", null, { cancelRequested: true }), c("b", 2, "pending")],
      ["b"],
    ],
    ["cancel-requested head holds its key", [c("k1", 1, "pending", "K", { cancelRequested: true }), c("k2", 2, "pending", "K")], []],
    ["seq compares as bigint, not string", [c("ten", 10, "pending", "K"), c("nine", 9, "pending", "K")], ["nine"]],
  ])("%s", (_label, candidates, expected) => {
    expect(nextLeasable(candidates)).toEqual(expected);
  });

  it("handles seq beyond 2^53", () => {
    const big = 2n ** 60n;
    const jobs: LeaseCandidate[] = [
      { ...job({ state: "pending", seq: big + 1n, orderingKey: "K", leaseExpiresAt: null }), id: "later" },
      { ...job({ state: "pending", seq: big, orderingKey: "K", leaseExpiresAt: null }), id: "first" },
    ];
    expect(nextLeasable(jobs)).toEqual(["first"]);
  });
});
