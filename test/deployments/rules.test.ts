// The deployment controller's rules as tables: each row is a deployment's desired state, its
// instances (with the outcome of their jobs) and the plan the controller must make.
import { describe, expect, it } from "vitest";
import { CLAIM_GRACE_MS, overallPhase, plan, type Action, type DeploymentView, type InstanceView } from "../../server/deployments/rules.js";
import { compareHeld } from "../../server/deployments/held.js";
import { healthOf } from "../../server/deployments/health.js";

const now = 1_000_000;
const inst = (
  revision: number,
  phase: InstanceView["phase"],
  step: InstanceView["step"] = null,
  job?: InstanceView["job"],
  claimedAt = now,
): InstanceView => ({
  revision: BigInt(revision),
  phase,
  step,
  jobId: job ? "job" : null,
  claimedAt: job ? claimedAt : null,
  ...(job ? { job } : {}),
});
const serving = (revision = 1): DeploymentView => ({ desired: "serving", revision: BigInt(revision) });
const wants = (desired: DeploymentView["desired"], revision = 1): DeploymentView => ({ desired, revision: BigInt(revision) });
const mv = (revision: number, to: string, step: string | null, reason?: string) =>
  expect.objectContaining({
    kind: "move",
    revision: BigInt(revision),
    to,
    step,
    ...(reason ? { reason: expect.stringContaining(reason) } : {}),
  });

describe("plan", () => {
  const rows: [string, DeploymentView, InstanceView[], unknown[]][] = [
    ["a new deployment gets its first instance", serving(), [], [{ kind: "create", revision: 1n }]],
    [
      "a loading instance starts its acquire",
      serving(),
      [inst(1, "loading", "acquire")],
      [{ kind: "start", revision: 1n, step: "acquire" }],
    ],
    ["a step in flight waits", serving(), [inst(1, "loading", "acquire", { state: "leased" })], []],
    ["acquired: load next", serving(), [inst(1, "loading", "acquire", { state: "succeeded" })], [mv(1, "loading", "load")]],
    [
      "loaded: ready, with the runtime id",
      serving(),
      [inst(1, "loading", "load", { state: "succeeded", runtimeId: "rt-1" })],
      [expect.objectContaining({ kind: "move", to: "ready", step: null, runtimeId: "rt-1" })],
    ],
    [
      "a failed load fails the instance, saying why",
      serving(),
      [inst(1, "loading", "load", { state: "failed", reason: "MODEL_LOAD_FAILED: bad gguf" })],
      [mv(1, "failed", null, "bad gguf")],
    ],
    ["ready and wanted: nothing to do", serving(), [inst(1, "ready")], []],
    ["a failed instance is not retried on its own", serving(), [inst(1, "failed")], []],
    [
      "revision change: the new one loads while the old one serves",
      serving(2),
      [inst(1, "ready"), inst(2, "loading", "load", { state: "pending" })],
      [],
    ],
    ["revision change: no new instance yet, so it is created", serving(2), [inst(1, "ready")], [{ kind: "create", revision: 2n }]],
    [
      "revision change: once the new one is ready the old drains",
      serving(2),
      [inst(1, "ready"), inst(2, "ready")],
      [mv(1, "draining", "drain", "revision 2 is ready")],
    ],
    ["revision change: a failed new revision leaves the old one serving", serving(2), [inst(1, "ready"), inst(2, "failed")], []],
    [
      "a superseded revision not yet loaded is dropped",
      serving(3),
      [inst(2, "loading", "load"), inst(3, "ready")],
      [mv(2, "unloaded", null, "superseded")],
    ],
    [
      "but a lost old revision reloads while the current one is failed",
      serving(3),
      [inst(2, "loading", "load"), inst(3, "failed")],
      [{ kind: "start", revision: 2n, step: "load" }],
    ],
    ["drain: ready instances drain", wants("drained"), [inst(1, "ready")], [mv(1, "draining", "drain", "drained by operator")]],
    ["draining starts its drain job", wants("drained"), [inst(1, "draining", "drain")], [{ kind: "start", revision: 1n, step: "drain" }]],
    ["drained: unload next", wants("drained"), [inst(1, "draining", "drain", { state: "succeeded" })], [mv(1, "draining", "unload")]],
    [
      "a failed drain still unloads",
      wants("drained"),
      [inst(1, "draining", "drain", { state: "failed", reason: "TIMEOUT" })],
      [mv(1, "draining", "unload", "drain failed")],
    ],
    ["unloaded", wants("drained"), [inst(1, "draining", "unload", { state: "succeeded" })], [mv(1, "unloaded", null)]],
    [
      "an unload the node could not do means nothing runs",
      wants("unloaded"),
      [inst(1, "draining", "unload", { state: "failed", reason: "NOT_FOUND" })],
      [mv(1, "unloaded", null, "unload failed")],
    ],
    ["unload: ready instances skip the drain", wants("unloaded"), [inst(1, "ready")], [mv(1, "draining", "unload")]],
    ["unload while draining: the drain is cut short", wants("unloaded"), [inst(1, "draining", "drain")], [mv(1, "draining", "unload")]],
    [
      "unload before it loaded: nothing runs",
      wants("unloaded"),
      [inst(1, "loading", "load")],
      [mv(1, "unloaded", null, "before it loaded")],
    ],
    ["delete waits for instances to settle", wants("deleted"), [inst(1, "draining", "unload", { state: "leased" })], []],
    ["delete removes once everything settled", wants("deleted"), [inst(1, "unloaded"), inst(2, "failed")], [{ kind: "remove" }]],
    [
      "a claim without a job row waits out its grace",
      serving(),
      [inst(1, "loading", "load", { state: "missing" }, now - CLAIM_GRACE_MS + 1)],
      [],
    ],
    [
      "then it is retried",
      serving(),
      [inst(1, "loading", "load", { state: "missing" }, now - CLAIM_GRACE_MS)],
      [mv(1, "loading", "load", "job lost")],
    ],
  ];
  it.each(rows)("%s", (_name, d, instances, expected) => {
    const actions: Action[] = plan(d, instances, now);
    expect(actions).toEqual(expected);
  });

  it("is stable: planning the same inputs twice gives the same plan", () => {
    const d = serving(2);
    const instances = [inst(1, "ready"), inst(2, "ready")];
    expect(plan(d, instances, now)).toEqual(plan(d, instances, now));
  });
});

describe("overallPhase", () => {
  it.each([
    [serving(), [], "loading"],
    [wants("unloaded"), [], "unloaded"],
    [serving(2), [inst(1, "ready"), inst(2, "loading")], "ready"],
    [serving(2), [inst(1, "unloaded"), inst(2, "failed")], "failed"],
    [wants("drained"), [inst(1, "ready")], "draining"],
    [wants("drained"), [inst(1, "unloaded")], "unloaded"],
    [serving(), [inst(1, "loading")], "loading"],
  ] as const)("case %#", (d, instances, phase) => {
    expect(overallPhase(d, [...instances])).toBe(phase);
  });
});

describe("compareHeld", () => {
  const expected = [
    { deploymentId: "a", revision: 1n, phase: "ready", jobId: null },
    { deploymentId: "b", revision: 1n, phase: "ready", jobId: null },
    { deploymentId: "c", revision: 1n, phase: "loading", jobId: "j" },
    { deploymentId: "d", revision: 1n, phase: "unloaded", jobId: null },
  ];
  it("unloads what the server does not expect and reloads what the node lost", () => {
    const held = [
      { deploymentId: "a", revision: 1n },
      { deploymentId: "a", revision: 2n },
      { deploymentId: "d", revision: 1n },
      { deploymentId: "zz", revision: 1n },
    ];
    const { strays, lost } = compareHeld(held, expected);
    expect(strays).toEqual([
      { deploymentId: "a", revision: 2n },
      { deploymentId: "d", revision: 1n },
      { deploymentId: "zz", revision: 1n },
    ]);
    // b was ready and is not held; c is still loading (its load job will report).
    expect(lost).toEqual([{ deploymentId: "b", revision: 1n }]);
  });
});

describe("healthOf", () => {
  it.each([
    [
      { state: "succeeded", result: { deploymentHealth: { healthy: true, detail: "ok" } }, failure: null },
      { answered: true, healthy: true, detail: "ok" },
    ],
    [
      { state: "succeeded", result: { deploymentHealth: {} }, failure: null },
      { answered: true, healthy: false, detail: "" },
    ],
    [
      { state: "failed", result: null, failure: { code: "JOB_FAILURE_CODE_NOT_FOUND", message: "gone" } },
      { answered: true, healthy: false, detail: "NOT_FOUND: gone" },
    ],
    [
      { state: "leased", result: null, failure: null },
      { answered: false, healthy: false, detail: "the node did not answer in time" },
    ],
  ] as const)("case %#", (job, expected) => {
    expect(healthOf(job as never)).toEqual(expected);
  });
});
