// forge agents rollout create | list | get | pause | resume | abort: staged rollouts of an agent
// release, shown with a progress bar and counts per state.
import {
  AbortAgentRolloutResponseSchema,
  CreateAgentRolloutResponseSchema,
  GetAgentRolloutResponseSchema,
  ListAgentRolloutsResponseSchema,
  PauseAgentRolloutResponseSchema,
  ResumeAgentRolloutResponseSchema,
  RolloutNodeState,
  RolloutState,
  type AgentRollout,
} from "../../gen/proto/modelforge/admin/v1/agent_upgrades_pb.js";
import {
  command,
  durationOption,
  idArg,
  parseIntFlag,
  parseLabels,
  repeatableOption,
  requiredOption,
  textOption,
  valueOption,
  type OptionValues,
} from "../args.js";
import { clean, dateOf, enumName, fields, formatLabels, formatTime, table } from "../format.js";
import { printList, printReply } from "../output.js";

/** "[########------------] 8/20 updated  2 updating  1 failed  ..." Pure. */
export function rolloutProgress(r: AgentRollout, width = 20): string {
  const c = r.counts;
  const total = c ? c.pending + c.updating + c.updated + c.failed + c.skipped : 0;
  const done = c ? c.updated + c.skipped : 0;
  const filled = total === 0 ? width : Math.round((done / total) * width);
  const counts = c
    ? `${c.updated}/${total} updated  ${c.updating} updating  ${c.pending} pending  ${c.failed} failed  ${c.skipped} skipped`
    : "";
  return `[${"#".repeat(filled)}${"-".repeat(width - filled)}] ${counts}`;
}

const stateName = (s: RolloutState) => enumName(RolloutState, s).toLowerCase();

function rolloutText(r: AgentRollout): string {
  const head = fields([
    ["rollout", r.id],
    ["version", clean(r.version)],
    ["state", `${stateName(r.state)}${r.pausedReason ? ` (${clean(r.pausedReason)})` : ""}`],
    ["selector", formatLabels(r.selector)],
    ["batch", `${Math.min(r.currentBatch + 1, r.batches)} of ${r.batches} (${r.batchPercent}% each)`],
    ["progress", rolloutProgress(r)],
  ]);
  if (r.nodes.length === 0) return head;
  const nodes = table(
    ["NODE", "BATCH", "STATE", "FROM", "REASON"],
    r.nodes.map((n) => [
      clean(n.nodeName || n.nodeId),
      String(n.batch + 1),
      enumName(RolloutNodeState, n.state).toLowerCase(),
      clean(n.fromVersion),
      clean(n.reason),
    ]),
  );
  return `${head}\n${nodes}`;
}

function batchPercent(values: OptionValues): number {
  const text = textOption(values, "batch");
  return text === "" ? 0 : parseIntFlag(text.replace(/%$/, ""), "--batch", 1, 100);
}

const createVerb = command("create", "Start a rollout of a recorded release", {
  options: {
    version: valueOption("VERSION", "the release's version (required)"),
    selector: repeatableOption("KEY=VALUE", "only nodes with this label (repeatable)"),
    batch: valueOption("PERCENT", "share of the nodes per batch, e.g. 10% (default 10%)"),
    "pause-between": valueOption("DURATION", "wait this long after a healthy batch, watching for regressions (default 0)"),
    "batch-deadline": valueOption("DURATION", "pause the rollout if a batch is not healthy by then (default 10m)"),
  },
  async run(ctx, values) {
    const selector = parseLabels(values.selector as string[] | undefined, "--selector");
    const pauseBetween = durationOption(values, "pause-between");
    const batchDeadline = durationOption(values, "batch-deadline");
    const res = await ctx.client().createAgentRollout({
      version: requiredOption(values, "version"),
      selector,
      batchPercent: batchPercent(values),
      ...(pauseBetween ? { pauseBetween } : {}),
      ...(batchDeadline ? { batchDeadline } : {}),
    });
    return printReply(ctx, CreateAgentRolloutResponseSchema, res, ({ rollout }) => (rollout ? rolloutText(rollout) : ""));
  },
});

const listVerb = command("list", "List rollouts, newest first", {
  async run(ctx) {
    const res = await ctx.client().listAgentRollouts({});
    printList(ctx, ListAgentRolloutsResponseSchema, res, {
      items: res.rollouts,
      empty: "No rollouts.\n",
      table: (rows) =>
        table(
          ["ID", "VERSION", "STATE", "BATCH", "PROGRESS", "CREATED"],
          rows.map((r) => [
            r.id,
            clean(r.version),
            stateName(r.state),
            `${Math.min(r.currentBatch + 1, r.batches)}/${r.batches}`,
            rolloutProgress(r, 10),
            formatTime(dateOf(r.createdAt)),
          ]),
        ),
    });
    return 0;
  },
});

const getVerb = command("get ID", "Show a rollout and its nodes", {
  async run(ctx, _values, positionals) {
    const res = await ctx.client().getAgentRollout({ rolloutId: idArg(positionals, "ID") });
    return printReply(ctx, GetAgentRolloutResponseSchema, res, ({ rollout }) => (rollout ? rolloutText(rollout) : ""));
  },
});

const reason = { reason: valueOption("TEXT", "why (recorded in the audit log)") };

const pauseVerb = command("pause ID", "Pause a running rollout", {
  options: reason,
  async run(ctx, values, positionals) {
    const res = await ctx.client().pauseAgentRollout({ rolloutId: idArg(positionals, "ID"), reason: textOption(values, "reason") });
    return printReply(ctx, PauseAgentRolloutResponseSchema, res, ({ rollout }) => (rollout ? rolloutText(rollout) : ""));
  },
});

const resumeVerb = command("resume ID", "Resume a paused rollout", {
  options: reason,
  async run(ctx, values, positionals) {
    const res = await ctx.client().resumeAgentRollout({ rolloutId: idArg(positionals, "ID"), reason: textOption(values, "reason") });
    return printReply(ctx, ResumeAgentRolloutResponseSchema, res, ({ rollout }) => (rollout ? rolloutText(rollout) : ""));
  },
});

const abortVerb = command("abort ID", "Abort a rollout: updated nodes stay updated, the rest stay as they are", {
  options: reason,
  async run(ctx, values, positionals) {
    const res = await ctx.client().abortAgentRollout({ rolloutId: idArg(positionals, "ID"), reason: textOption(values, "reason") });
    return printReply(ctx, AbortAgentRolloutResponseSchema, res, ({ rollout }) => (rollout ? rolloutText(rollout) : ""));
  },
});

export const rolloutVerbs = [createVerb, listVerb, getVerb, pauseVerb, resumeVerb, abortVerb];
