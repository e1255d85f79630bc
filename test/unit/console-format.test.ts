// The console's pure formatters: the fleet page's Agent column and rollout line (ui/src/agent-version.ts), a replica's GPUs,
// a service key's last use.
import { describe, expect, it } from "vitest";
import { create } from "@bufbuild/protobuf";
import { timestampFromMs } from "@bufbuild/protobuf/wkt";
import {
  AgentRolloutSchema,
  RolloutCountsSchema,
  RolloutNodeSchema,
  RolloutNodeState,
  RolloutState,
} from "../../gen/proto/modelforge/admin/v1/agent_upgrades_pb.js";
import { activeRollout, agentText, rolloutLine } from "../../ui/src/agent-version.js";
import { gpusText, minuteAge } from "../../ui/src/format.js";

const step = (state: RolloutNodeState, reason = "") => create(RolloutNodeSchema, { nodeId: "n1", state, reason });

describe("agentText", () => {
  it.each([
    ["no rollout", { agentVersion: "0.1.0", agentOutdated: false }, undefined, "0.1.0"],
    ["outdated", { agentVersion: "0.0.9", agentOutdated: true }, undefined, "0.0.9 (outdated)"],
    ["never connected", { agentVersion: "", agentOutdated: false }, undefined, "-"],
    ["not in the rollout", { agentVersion: "0.1.0", agentOutdated: false }, { version: "0.2.0" }, "0.1.0"],
    [
      "waiting for its batch",
      { agentVersion: "0.1.0", agentOutdated: false },
      { version: "0.2.0", node: step(RolloutNodeState.PENDING) },
      "0.1.0 → 0.2.0 pending",
    ],
    [
      "updating",
      { agentVersion: "0.1.0", agentOutdated: false },
      { version: "0.2.0", node: step(RolloutNodeState.UPDATING) },
      "0.1.0 → 0.2.0 updating",
    ],
    [
      "back on the new version, deployments not READY yet",
      { agentVersion: "0.2.0", agentOutdated: false },
      { version: "0.2.0", node: step(RolloutNodeState.UPDATING) },
      "0.2.0, deployments not READY yet",
    ],
    ["updated", { agentVersion: "0.2.0", agentOutdated: false }, { version: "0.2.0", node: step(RolloutNodeState.UPDATED) }, "0.2.0"],
    [
      "rolled back",
      { agentVersion: "0.1.0", agentOutdated: false },
      { version: "0.3.0", node: step(RolloutNodeState.FAILED, "rolled back: 0.3.0 exited 3 times") },
      "0.1.0 → 0.3.0 failed: rolled back: 0.3.0 exited 3 times",
    ],
  ])("%s", (_name, node, rollout, want) => {
    expect(agentText(node, rollout)).toBe(want);
  });
});

describe("the rollout shown", () => {
  const rollout = (id: string, state: RolloutState) => create(AgentRolloutSchema, { id, state, version: "0.2.0", batches: 3 });
  it("is the newest running or paused one; a finished one shows none", () => {
    expect(
      activeRollout([rollout("a", RolloutState.COMPLETED), rollout("b", RolloutState.PAUSED), rollout("c", RolloutState.RUNNING)])?.id,
    ).toBe("b");
    expect(activeRollout([rollout("a", RolloutState.COMPLETED), rollout("b", RolloutState.ABORTED)])).toBeUndefined();
  });
  it("reads as a line of counts, with its batch and why it paused", () => {
    const r = create(AgentRolloutSchema, {
      version: "0.2.0",
      state: RolloutState.PAUSED,
      pausedReason: "batch 1 of 3 failed: n1: rolled back",
      currentBatch: 1,
      batches: 3,
      counts: create(RolloutCountsSchema, { updated: 2, updating: 0, pending: 2, failed: 1 }),
    });
    expect(rolloutLine(r)).toBe(
      "Rollout to 0.2.0, batch 2 of 3: 2 updated, 0 updating, 2 pending, 1 failed (paused: batch 1 of 3 failed: n1: rolled back)",
    );
    expect(rolloutLine(create(AgentRolloutSchema, { version: "0.2.0", state: RolloutState.RUNNING, currentBatch: 3, batches: 3 }))).toBe(
      "Rollout to 0.2.0, batch 3 of 3: 0 updated, 0 updating, 0 pending, 0 failed",
    );
  });
});

describe("a replica's GPUs", () => {
  it.each([
    ["a CPU replica", [], "-"],
    ["one GPU", [{ index: 1, uuid: "GPU-bbbb" }], "1 (GPU-bbbb)"],
    [
      "two, as assigned",
      [
        { index: 0, uuid: "GPU-aaaa" },
        { index: 3, uuid: "GPU-dddd" },
      ],
      "0 (GPU-aaaa), 3 (GPU-dddd)",
    ],
  ])("%s reads %s", (_name, gpus, want) => expect(gpusText(gpus)).toBe(want));
});

describe("a key's last use, known to the minute", () => {
  const now = Date.parse("2026-12-04T10:05:20Z");
  it.each([
    ["never used", undefined, "never"],
    ["in the minute now running", now - 20_000, "this minute"],
    ["in the last minute, flushed late", now - 59_000, "this minute"],
    ["a minute before", now - 80_000, "1m ago"],
    ["two hours before", now - 2 * 3_600_000, "2h ago"],
  ])("%s reads %s", (_name, at, want) => expect(minuteAge(at === undefined ? undefined : timestampFromMs(at), now)).toBe(want));
});
