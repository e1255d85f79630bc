// The rollout rules as tables: version limits, batching with last-READY-replica nodes last, and
// each step of a batch on an injected time (send, updated, healthy, regression window, deadline,
// failure, uninterruptible jobs).
import { describe, expect, it } from "vitest";
import { durationFromMs } from "@bufbuild/protobuf/wkt";
import { Code, ConnectError } from "@connectrpc/connect";
import { batchSize, planBatches, stepRollout, updateRefusal, type NodeView, type RolloutView } from "../../server/agents/rollout-rules.js";
import { platformOf, rolloutSettings } from "../../server/agents/rollout-input.js";
import { checkReleaseName, checkSignaturePresence } from "../../server/agents/release-rules.js";

describe("version limits", () => {
  it.each([
    ["1.2.0", "1.3.0", "1.0.0", undefined],
    ["1.3.0", "1.2.0", "1.0.0", undefined], // down within a major version
    ["2.0.0", "1.9.0", "1.0.0", "down across a major version"],
    ["1.9.0", "2.0.0", "1.0.0", undefined], // up across one is an upgrade
    ["1.2.0", "0.9.0", "0.0.0", "down across a major version"],
    ["1.2.0", "1.1.0", "1.2.0", "below the oldest agent version"],
    ["", "1.1.0", "0.0.0", undefined], // a node that never said its version
    ["1.0.0", "one", "0.0.0", "not a semantic version"],
  ])("%s -> %s (floor %s): %s", (from, to, floor, refusal) => {
    const got = updateRefusal(from, to, floor);
    if (refusal === undefined) expect(got).toBeUndefined();
    else expect(got).toContain(refusal);
  });
});

describe("batches", () => {
  it.each([
    [5, 40, 2],
    [5, 10, 1],
    [5, 100, 5],
    [0, 50, 1],
    [21, 10, 3],
  ])("%i nodes at %i%%: %i per batch", (nodes, percent, size) => expect(batchSize(nodes, percent)).toBe(size));

  it("puts nodes holding a last READY replica last, leaves nodes already on the version out", () => {
    const c = (name: string, last = false, agentVersion = "1.0.0") => ({ id: name, name, agentVersion, holdsLastReadyReplica: last });
    const plan = planBatches([c("e", true), c("a"), c("d"), c("b", true), c("c", false, "1.1.0")], "1.1.0", 40);
    expect(plan).toEqual({
      batches: [
        ["a", "d"],
        ["b", "e"],
      ],
      current: ["c"],
    });
  });
});

const T0 = 1_000_000;
const rollout = (over: Partial<RolloutView> = {}): RolloutView => ({
  version: "1.1.0",
  currentBatch: 0,
  batches: 2,
  pauseBetweenMs: 60_000,
  batchDeadlineMs: 300_000,
  batchStartedAt: undefined,
  batchHealthyAt: undefined,
  ...over,
});
const node = (id: string, over: Partial<NodeView> = {}): NodeView => ({
  id,
  name: id,
  state: "pending",
  connected: true,
  agentVersion: "1.0.0",
  deploymentsReady: true,
  busy: false,
  needsSurge: [],
  surgeWaiting: [],
  reason: undefined,
  ...over,
});
const back = { state: "updating", agentVersion: "1.1.0" } as const;

describe("a step of a batch", () => {
  it.each<[string, RolloutView, NodeView[], number, ReturnType<typeof stepRollout>]>([
    [
      "starts: sends to connected, idle pending nodes only",
      rollout(),
      [node("a"), node("b", { connected: false }), node("c", { busy: true })],
      T0,
      { kind: "wait", send: ["a"], updated: [], surge: [] },
    ],
    [
      "asks for a surge before updating a node that serves a deployment's only READY replicas",
      rollout(),
      [node("a", { needsSurge: ["d1", "d2"] }), node("b")],
      T0,
      { kind: "wait", send: ["b"], updated: [], surge: [{ nodeId: "a", deployments: ["d1", "d2"] }] },
    ],
    [
      "waits for the surge replica to be READY, then sends",
      rollout({ batchStartedAt: T0 }),
      [node("a", { surgeWaiting: ["tiny"] })],
      T0 + 1_000,
      { kind: "wait", send: [], updated: [], surge: [] },
    ],
    [
      "names a surge not READY by the deadline",
      rollout({ batchStartedAt: T0 }),
      [node("a", { surgeWaiting: ["tiny"] })],
      T0 + 300_000,
      { kind: "pause", reason: "batch 1 of 2 not healthy within 300s: a waits for a surge replica of tiny", updated: [] },
    ],
    [
      "asks no surge of a node it cannot send to yet",
      rollout(),
      [node("a", { needsSurge: ["d1"], busy: true }), node("b", { needsSurge: ["d2"], connected: false })],
      T0,
      { kind: "wait", send: [], updated: [], surge: [] },
    ],
    [
      "marks a node back on the version with READY deployments as updated",
      rollout({ batchStartedAt: T0 }),
      [node("a", back), node("b", { state: "updating" })],
      T0 + 1_000,
      { kind: "wait", send: [], updated: ["a"], surge: [] },
    ],
    [
      "waits while a node is back but its deployments are not READY",
      rollout({ batchStartedAt: T0 }),
      [node("a", { ...back, deploymentsReady: false })],
      T0 + 1_000,
      { kind: "wait", send: [], updated: [], surge: [] },
    ],
    [
      "is healthy once every node is updated",
      rollout({ batchStartedAt: T0 }),
      [node("a", back), node("b", { state: "updated", agentVersion: "1.1.0" })],
      T0 + 1_000,
      { kind: "healthy", updated: ["a"] },
    ],
    [
      "pauses when a node reported a failed update",
      rollout({ batchStartedAt: T0 }),
      [node("a", back), node("b", { state: "failed", reason: "rolled back: exited at start" })],
      T0 + 1_000,
      { kind: "pause", reason: "batch 1 of 2 failed: b: rolled back: exited at start", updated: ["a"] },
    ],
    [
      "pauses at the deadline, naming what is missing",
      rollout({ batchStartedAt: T0 }),
      [node("a", { state: "updating" }), node("b", { busy: true }), node("c", { ...back, connected: false })],
      T0 + 300_000,
      {
        kind: "pause",
        reason: "batch 1 of 2 not healthy within 300s: a is on 1.0.0; b runs a job that cannot be interrupted; c is not connected",
        updated: [],
      },
    ],
    [
      "watches the healthy batch for the window",
      rollout({ batchStartedAt: T0, batchHealthyAt: T0 + 10_000 }),
      [node("a", { state: "updated", agentVersion: "1.1.0" })],
      T0 + 69_999,
      { kind: "wait", send: [], updated: [], surge: [] },
    ],
    [
      "pauses on a regression within the window",
      rollout({ batchStartedAt: T0, batchHealthyAt: T0 + 10_000 }),
      [node("a", { state: "updated", agentVersion: "1.1.0", deploymentsReady: false })],
      T0 + 20_000,
      { kind: "pause", reason: "batch 1 of 2 regressed: a's deployments are not READY", updated: [] },
    ],
    [
      "advances after the window",
      rollout({ batchStartedAt: T0, batchHealthyAt: T0 + 10_000 }),
      [node("a", { state: "updated", agentVersion: "1.1.0" })],
      T0 + 70_000,
      { kind: "advance" },
    ],
    [
      "completes after the last batch's window",
      rollout({ currentBatch: 1, batchStartedAt: T0, batchHealthyAt: T0 }),
      [node("a", { state: "updated", agentVersion: "1.1.0" })],
      T0 + 60_000,
      { kind: "complete" },
    ],
  ])("%s", (_name, r, nodes, now, want) => expect(stepRollout(r, nodes, now)).toEqual(want));
});

describe("inputs", () => {
  const codeOf = (f: () => unknown) => {
    try {
      f();
    } catch (err) {
      return ConnectError.from(err).code;
    }
    return undefined;
  };
  it("defaults and reads settings", () => {
    expect(rolloutSettings({ batchPercent: 0 })).toEqual({ batchPercent: 10, pauseBetweenMs: 0, batchDeadlineMs: 600_000 });
    const pauseBetween = durationFromMs(300_000);
    expect(rolloutSettings({ batchPercent: 40, pauseBetween })).toEqual({
      batchPercent: 40,
      pauseBetweenMs: 300_000,
      batchDeadlineMs: 600_000,
    });
  });
  it.each([
    () => rolloutSettings({ batchPercent: 101 }),
    () => rolloutSettings({ batchPercent: 10, batchDeadline: durationFromMs(0) }),
    () => rolloutSettings({ batchPercent: 10, pauseBetween: durationFromMs(25 * 3_600_000) }),
    () => checkReleaseName({ version: "v1", platform: "linux-x64" }),
    () => checkReleaseName({ version: "1.0.0", platform: "linux x64" }),
    () => checkSignaturePresence(new Uint8Array(64), false),
    () => checkSignaturePresence(new Uint8Array(63), true),
  ])("refuses bad input %#", (f) => expect(codeOf(f)).toBe(Code.InvalidArgument));
  it("wants a signature when a key is configured", () => {
    expect(codeOf(() => checkSignaturePresence(new Uint8Array(), true))).toBe(Code.FailedPrecondition);
    expect(codeOf(() => checkSignaturePresence(new Uint8Array(), false))).toBeUndefined();
  });
  it.each([
    [{ architecture: "x64" }, "linux-x64"],
    [{ architecture: "x86_64" }, "linux-x64"],
    [{ architecture: "aarch64" }, "linux-arm64"],
    [{}, undefined],
    [null, undefined],
  ])("platform of %j is %s", (host, want) => expect(platformOf(host)).toBe(want));
});
