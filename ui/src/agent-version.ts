// The fleet page's Agent column and rollout line: pure, so they are tested without a browser.
import type { Node } from "../../gen/proto/modelforge/admin/v1/admin_pb.js";
import {
  type AgentRollout,
  RolloutNodeState,
  RolloutState,
  type RolloutNode,
} from "../../gen/proto/modelforge/admin/v1/agent_upgrades_pb.js";
import { enumText } from "./format.js";

/** The rollout an operator is watching: the newest running or paused one. */
export function activeRollout(rollouts: readonly AgentRollout[]): AgentRollout | undefined {
  return rollouts.find((r) => r.state === RolloutState.RUNNING || r.state === RolloutState.PAUSED);
}

/** "0.1.0", "0.1.0 (outdated)", "0.1.0 → 0.2.0 updating", "0.2.0, deployments not READY yet", "0.1.0 → 0.2.0 failed: why". */
export function agentText(node: Pick<Node, "agentVersion" | "agentOutdated">, rollout?: { version: string; node?: RolloutNode }): string {
  const own = (node.agentVersion || "-") + (node.agentOutdated ? " (outdated)" : "");
  const step = rollout?.node;
  if (step === undefined || rollout === undefined || step.state === RolloutNodeState.UPDATED) return own;
  if (node.agentVersion === rollout.version) {
    // Already on it: waiting only for its deployments to be READY again (or chosen while current).
    return step.state === RolloutNodeState.UPDATING ? `${own}, deployments not READY yet` : own;
  }
  const reason = step.reason === "" ? "" : `: ${step.reason}`;
  return `${own} → ${rollout.version} ${enumText(RolloutNodeState, step.state)}${reason}`;
}

/** "Rollout to 0.2.0, batch 2 of 3: 2 updated, 2 updating, 1 pending, 0 failed (paused: why)". */
export function rolloutLine(r: AgentRollout): string {
  const c = r.counts;
  const counts = `${c?.updated ?? 0} updated, ${c?.updating ?? 0} updating, ${c?.pending ?? 0} pending, ${c?.failed ?? 0} failed`;
  const batch = Math.min(r.currentBatch + 1, r.batches);
  const paused = r.state === RolloutState.PAUSED ? ` (paused${r.pausedReason === "" ? "" : `: ${r.pausedReason}`})` : "";
  return `Rollout to ${r.version}, batch ${batch} of ${r.batches}: ${counts}${paused}`;
}
