// The deployment controller's rules as tables: each row is a deployment's desired state, its
// instances (with the outcome of their jobs) and the plan the controller must make.
import { describe, expect, it } from "vitest";
import {
  CLAIM_GRACE_MS,
  MAX_RESTARTS,
  overallPhase,
  plan,
  type Action,
  type DeploymentView,
  type InstanceView,
  newestRevisionFirst,
} from "../../../server/deployments/rules.js";
import { nodeLoss } from "../../../server/deployments/node-loss.js";
import { compareHeld } from "../../../server/deployments/held.js";
import { healthOf } from "../../../server/deployments/health.js";

const now = 1_000_000;
const inst = (
  revision: number,
  phase: InstanceView["phase"],
  step: InstanceView["step"] = null,
  job?: InstanceView["job"],
  claimedAt = now,
  replica = 0,
): InstanceView => ({
  revision: BigInt(revision),
  replica,
  phase,
  step,
  jobId: job ? "job" : null,
  claimedAt: job ? claimedAt : null,
  ...(job ? { job } : {}),
});
const serving = (revision = 1, replicas = 1): DeploymentView => ({ desired: "serving", revision: BigInt(revision), replicas });
/** Replica `slot` of a revision, with extra fields. */
const rep = (revision: number, slot: number, phase: InstanceView["phase"], extra: Partial<InstanceView> = {}): InstanceView => ({
  ...inst(revision, phase, null, undefined, now, slot),
  ...extra,
});
const wants = (desired: DeploymentView["desired"], revision = 1): DeploymentView => ({ desired, revision: BigInt(revision) });
const mv = (revision: number, to: string, step: string | null, reason?: string, replica = 0) =>
  expect.objectContaining({
    kind: "move",
    revision: BigInt(revision),
    replica,
    to,
    step,
    ...(reason ? { reason: expect.stringContaining(reason) } : {}),
  });

describe("plan", () => {
  const rows: [string, DeploymentView, InstanceView[], unknown[]][] = [
    ["a new deployment gets its first instance", serving(), [], [{ kind: "create", revision: 1n, replica: 0 }]],
    ["three replicas: three slots at once", serving(1, 3), [], [0, 1, 2].map((replica) => ({ kind: "create", revision: 1n, replica }))],
    ["a pending replica is placed", serving(), [rep(1, 0, "pending")], [{ kind: "place", revision: 1n, replica: 0 }]],
    [
      "a loading instance starts its acquire",
      serving(),
      [inst(1, "loading", "acquire")],
      [{ kind: "start", revision: 1n, replica: 0, step: "acquire" }],
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
    [
      "revision change: no new instance yet, so it is created",
      serving(2),
      [inst(1, "ready")],
      [{ kind: "create", revision: 2n, replica: 0 }],
    ],
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
      [{ kind: "start", revision: 2n, replica: 0, step: "load" }],
    ],
    ["drain: ready instances drain", wants("drained"), [inst(1, "ready")], [mv(1, "draining", "drain", "drained by operator")]],
    [
      "draining starts its drain job",
      wants("drained"),
      [inst(1, "draining", "drain")],
      [{ kind: "start", revision: 1n, replica: 0, step: "drain" }],
    ],
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
    // Replicas: failover, scaling, restarts.
    [
      "a ready replica whose node is lost waits to be placed again",
      serving(1, 2),
      [rep(1, 0, "ready", { nodeLost: "node n1 is offline" }), rep(1, 1, "ready")],
      [expect.objectContaining({ kind: "move", replica: 0, to: "pending", unplace: true, reason: expect.stringContaining("offline") })],
    ],
    [
      "a loading replica whose node is lost too, even with its job in flight",
      serving(),
      [{ ...inst(1, "loading", "load", { state: "leased" }), nodeLost: "node n1 was disabled" }],
      [expect.objectContaining({ kind: "move", to: "pending", unplace: true })],
    ],
    [
      "a replica whose GPU went missing leaves its node, which is told to stop its runtime",
      serving(1, 2),
      [rep(1, 0, "ready", { nodeLost: "GPU G1 of node n1 is missing", stopOnNode: true }), rep(1, 1, "ready")],
      [expect.objectContaining({ kind: "move", replica: 0, to: "pending", unplace: true, stopOnNode: true })],
    ],
    [
      "a draining replica on a node that is up but lost its GPU: stopped there",
      wants("drained"),
      [rep(1, 0, "draining", { step: "drain", nodeLost: "GPU G1 of node n1 is missing", stopOnNode: true })],
      [expect.objectContaining({ kind: "move", to: "unloaded", reason: expect.stringContaining("stopping it there"), stopOnNode: true })],
    ],
    [
      "a draining replica on a lost node has nothing left to stop",
      wants("drained"),
      [rep(1, 0, "draining", { step: "drain", nodeLost: "node n1 was decommissioned" })],
      [mv(1, "unloaded", null, "nothing left")],
    ],
    [
      "scaled down: the surplus slot drains",
      serving(1, 1),
      [rep(1, 0, "ready"), rep(1, 1, "ready")],
      [mv(1, "draining", "drain", "scaled to 1", 1)],
    ],
    [
      "scaled down before it loaded: unloaded",
      serving(1, 1),
      [rep(1, 0, "ready"), rep(1, 1, "loading", { step: "acquire" })],
      [mv(1, "unloaded", null, "scaled down", 1)],
    ],
    [
      "scaled down while pending: never placed",
      serving(1, 1),
      [rep(1, 0, "ready"), rep(1, 1, "pending")],
      [mv(1, "unloaded", null, "no longer wanted", 1)],
    ],
    [
      "scaled up again: an unloaded slot is placed afresh",
      serving(1, 2),
      [rep(1, 0, "ready"), rep(1, 1, "unloaded")],
      [expect.objectContaining({ kind: "move", replica: 1, to: "pending", unplace: true })],
    ],
    [
      "a replica that served and failed is placed again, counted",
      serving(),
      [rep(1, 0, "failed", { served: true, restarts: 1 })],
      [expect.objectContaining({ kind: "move", to: "pending", unplace: true, restart: true })],
    ],
    ["...until its restarts are spent", serving(), [rep(1, 0, "failed", { served: true, restarts: MAX_RESTARTS })], []],
    ["scaled to zero: everything drains", serving(1, 0), [rep(1, 0, "ready")], [mv(1, "draining", "drain", "scaled to 0")]],
    // Rolling revisions: surge one, then drain one old.
    [
      "rollout: one new replica at a time",
      serving(2, 2),
      [rep(1, 0, "ready"), rep(1, 1, "ready")],
      [{ kind: "create", revision: 2n, replica: 0 }],
    ],
    [
      "rollout: while it loads, nothing else",
      serving(2, 2),
      [rep(1, 0, "ready"), rep(1, 1, "ready"), rep(2, 0, "loading", { step: "load", jobId: "j", job: { state: "leased" } })],
      [],
    ],
    [
      "rollout: once it is ready, one old drains and the next new one is made",
      serving(2, 2),
      [rep(1, 0, "ready"), rep(1, 1, "ready"), rep(2, 0, "ready")],
      [mv(1, "draining", "drain", "revision 2 is ready", 1), { kind: "create", revision: 2n, replica: 1 }],
    ],
    [
      "rollout: a failed new replica stops it, the old ones serve",
      serving(2, 2),
      [rep(1, 0, "ready"), rep(1, 1, "ready"), rep(2, 0, "failed")],
      [],
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
    [serving(), [], "pending"],
    [serving(1, 2), [rep(1, 0, "ready"), rep(1, 1, "loading")], "degraded"],
    [serving(1, 2), [rep(1, 0, "ready"), rep(1, 1, "ready")], "ready"],
    [serving(1, 2), [rep(1, 0, "pending"), rep(1, 1, "pending")], "pending"],
    [serving(1, 2), [rep(1, 0, "pending"), rep(1, 1, "loading")], "loading"],
    [serving(2, 2), [rep(1, 0, "ready"), rep(1, 1, "ready"), rep(2, 0, "loading")], "ready"],
    [serving(1, 0), [rep(1, 0, "draining")], "draining"],
    [serving(1, 0), [rep(1, 0, "unloaded")], "unloaded"],
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

describe("nodeLoss", () => {
  const bounds = { staleAfterMs: 30_000, replaceAfterMs: 10_000 };
  const node = (extra: Partial<Parameters<typeof nodeLoss>[0] & object> = {}) => ({
    id: "n1",
    disabledAt: null,
    decommissionedAt: null,
    lastHeartbeatAt: new Date(now - 1_000),
    sessionReplica: "r1",
    ...extra,
  });
  it.each([
    ["a live node", node(), undefined],
    ["a node that is gone", undefined, "gone"],
    ["disabled", node({ disabledAt: new Date(now) }), "disabled"],
    ["decommissioned", node({ decommissionedAt: new Date(now) }), "decommissioned"],
    ["session closed, still within the grace", node({ sessionReplica: null, lastHeartbeatAt: new Date(now - 10_000) }), undefined],
    ["session closed past the grace", node({ sessionReplica: null, lastHeartbeatAt: new Date(now - 10_001) }), "session closed"],
    [
      "updating its agent, session closed past the grace: expected back",
      node({ sessionReplica: null, updating: true, lastHeartbeatAt: new Date(now - 29_000) }),
      undefined,
    ],
    [
      "updating its agent, but silent past stale",
      node({ sessionReplica: null, updating: true, lastHeartbeatAt: new Date(now - 30_001) }),
      "offline",
    ],
    ["a session said to be open but silent past stale", node({ lastHeartbeatAt: new Date(now - 30_001) }), "offline"],
    ["never heard from", node({ lastHeartbeatAt: null }), "offline"],
  ] as const)("%s", (_name, n, why) => {
    const said = nodeLoss(n, now, bounds);
    if (why === undefined) expect(said).toBeUndefined();
    else expect(said).toContain(why);
  });
});

describe("compareHeld", () => {
  const expected = [
    { deploymentId: "a", revision: 1n, replica: 0, phase: "ready", jobId: null },
    { deploymentId: "b", revision: 1n, replica: 0, phase: "ready", jobId: null },
    { deploymentId: "c", revision: 1n, replica: 0, phase: "loading", jobId: "j" },
    { deploymentId: "d", revision: 1n, replica: 0, phase: "unloaded", jobId: null },
    // Two replicas of one revision on the node (max_per_node 2).
    { deploymentId: "e", revision: 1n, replica: 0, phase: "ready", jobId: null },
    { deploymentId: "e", revision: 1n, replica: 1, phase: "ready", jobId: null },
  ];
  it("unloads what the server does not expect and reloads what the node lost", () => {
    const held = [
      { deploymentId: "a", revision: 1n, replica: 0 },
      { deploymentId: "a", revision: 2n, replica: 0 },
      { deploymentId: "d", revision: 1n, replica: 0 },
      { deploymentId: "zz", revision: 1n, replica: 0 },
      { deploymentId: "e", revision: 1n, replica: 1 },
      { deploymentId: "e", revision: 1n, replica: 2 },
    ];
    const { strays, lost } = compareHeld(held, expected);
    expect(strays).toEqual([
      { deploymentId: "a", revision: 2n, replica: 0 },
      { deploymentId: "d", revision: 1n, replica: 0 },
      { deploymentId: "zz", revision: 1n, replica: 0 },
      { deploymentId: "e", revision: 1n, replica: 2 },
    ]);
    // b was ready and is not held; c is still loading (its load job will report); e's slot 0 is gone
    // though slot 1 is held.
    expect(lost).toEqual([
      { deploymentId: "b", revision: 1n, replica: 0 },
      { deploymentId: "e", revision: 1n, replica: 0 },
    ]);
  });
  it("an older agent names no slot: its one runtime of a revision serves whichever replica is on the node", () => {
    const onNode = [{ deploymentId: "a", revision: 1n, replica: 3, phase: "ready", jobId: null }];
    expect(compareHeld([{ deploymentId: "a", revision: 1n, replica: undefined }], onNode)).toEqual({ strays: [], lost: [] });
    expect(compareHeld([{ deploymentId: "a", revision: 2n, replica: undefined }], onNode)).toEqual({
      strays: [{ deploymentId: "a", revision: 2n, replica: undefined }],
      lost: [{ deploymentId: "a", revision: 1n, replica: 3 }],
    });
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

describe("newestRevisionFirst", () => {
  it("lists the newest revision's replicas first, each revision's by slot", () => {
    const replicas = [
      { revision: 1n, replica: 1 },
      { revision: 2n, replica: 1 },
      { revision: 1n, replica: 0 },
      { revision: 10n, replica: 0 },
      { revision: 2n, replica: 0 },
    ];
    expect(replicas.sort(newestRevisionFirst).map((r) => `${r.revision}/${r.replica}`)).toEqual(["10/0", "2/0", "2/1", "1/0", "1/1"]);
  });
});
