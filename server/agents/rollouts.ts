// Rollouts' I/O around ./rollout-rules.ts: create one from the nodes a selector chooses, run its
// steps (the leader), deliver update instructions to the nodes whose sessions this replica holds,
// and hear nodes' update reports at session open. Every change is audited.
import { randomUUID } from "node:crypto";
import { Code, ConnectError } from "@connectrpc/connect";
import type { AgentRollout, AgentRolloutNode, Prisma, PrismaClient } from "../../gen/prisma/client.js";
import type { Clock } from "../../common/clock.js";
import { nodeActor, recordAudit, systemActor, type AuditActor } from "../audit/audit.js";
import { planBatches, stepRollout, updateRefusal, type NodeState, type NodeView, type Step } from "./rollout-rules.js";
import { rolloutSettings, type RolloutSettings } from "./rollout-input.js";
import { checkReleaseName } from "./release-rules.js";
import { batchNodeViews, candidatesOf } from "./rollout-reads.js";

export type RolloutWithNodes = AgentRollout & { nodes: AgentRolloutNode[] };

export interface RolloutsDeps {
  prisma: PrismaClient;
  clock: Clock;
  minAgentVersion: string;
  /** Whether the node has an open session on this replica (the others' show in the node's row). */
  connectedHere(nodeId: string): boolean;
}

export interface CreateRollout {
  version: string;
  selector: Record<string, string>;
  settings: Parameters<typeof rolloutSettings>[0];
}

const active = ["running", "paused"];

export class AgentRollouts {
  constructor(private readonly deps: RolloutsDeps) {}

  private now(): Date {
    return new Date(this.deps.clock.now());
  }

  async create(input: CreateRollout, correlationId: string, by: AuditActor): Promise<RolloutWithNodes> {
    checkReleaseName({ version: input.version, platform: "linux-x64" });
    const settings = rolloutSettings(input.settings);
    const { prisma } = this.deps;
    if ((await prisma.agentRelease.count({ where: { version: input.version } })) === 0) {
      throw new ConnectError(
        `no release of ${input.version} is recorded: push one first (forge agents releases push)`,
        Code.FailedPrecondition,
      );
    }
    const candidates = await candidatesOf(prisma, input.selector);
    const refusals = candidates.flatMap((c) => {
      const why = c.agentVersion === input.version ? undefined : updateRefusal(c.agentVersion, input.version, this.deps.minAgentVersion);
      return why === undefined ? [] : [`${c.name}: ${why}`];
    });
    if (refusals.length > 0) throw new ConnectError(`refused: ${refusals.slice(0, 10).join("; ")}`, Code.FailedPrecondition);
    if (candidates.length === 0) throw new ConnectError("no node matches the selector", Code.FailedPrecondition);
    const plan = planBatches(candidates, input.version, settings.batchPercent);
    const id = randomUUID();
    const now = this.now();
    return prisma.$transaction(async (tx) => {
      await tx.$queryRaw`SELECT 1 AS locked FROM (SELECT pg_advisory_xact_lock(hashtextextended('modelforge.agent-rollouts', 0))) AS l`;
      const running = await tx.agentRollout.findFirst({ where: { state: { in: active } } });
      if (running !== null) {
        throw new ConnectError(`rollout ${running.id} (${running.version}) is ${running.state}: abort it first`, Code.FailedPrecondition);
      }
      const versionOf = new Map(candidates.map((c) => [c.id, c.agentVersion]));
      const nodes = [
        ...plan.batches.flatMap((ids, batch) => ids.map((nodeId) => ({ nodeId, batch, state: "pending" }))),
        ...plan.current.map((nodeId) => ({ nodeId, batch: 0, state: "skipped", reason: `already on ${input.version}` })),
      ].map((n) => ({ ...n, rolloutId: id, fromVersion: versionOf.get(n.nodeId) ?? "" }));
      await tx.agentRollout.create({ data: rolloutRow(id, input, settings, plan.batches.length, now) });
      await tx.agentRolloutNode.createMany({ data: nodes });
      await audit(tx, by, "agent.rollout.created", id, correlationId, now, {
        version: input.version,
        nodes: String(nodes.length),
        batches: String(plan.batches.length),
      });
      return tx.agentRollout.findUniqueOrThrow({ where: { id }, include: { nodes: true } });
    });
  }

  list(): Promise<RolloutWithNodes[]> {
    return this.deps.prisma.agentRollout.findMany({ orderBy: { createdAt: "desc" }, take: 100, include: { nodes: true } });
  }

  async get(id: string): Promise<RolloutWithNodes> {
    const row = await this.deps.prisma.agentRollout.findUnique({ where: { id }, include: { nodes: true } });
    if (row === null) throw new ConnectError(`rollout ${id} not found`, Code.NotFound);
    return row;
  }

  /** Pause, resume or abort, from the states each is allowed in. */
  async change(
    id: string,
    verb: "pause" | "resume" | "abort",
    reason: string,
    correlationId: string,
    by: AuditActor,
  ): Promise<RolloutWithNodes> {
    const from: Record<typeof verb, string[]> = { pause: ["running"], resume: ["paused"], abort: active };
    const now = this.now();
    const data: Record<typeof verb, Prisma.AgentRolloutUpdateInput> = {
      pause: { state: "paused", pausedReason: reason || "paused by an operator" },
      // The deadline of the batch under way counts again from the resume.
      resume: { state: "running", pausedReason: null, batchStartedAt: now },
      abort: { state: "aborted" },
    };
    await this.deps.prisma.$transaction(async (tx) => {
      const row = await tx.agentRollout.findUnique({ where: { id } });
      if (row === null) throw new ConnectError(`rollout ${id} not found`, Code.NotFound);
      if (!from[verb].includes(row.state))
        throw new ConnectError(`rollout ${id} is ${row.state}: cannot ${verb} it`, Code.FailedPrecondition);
      await tx.agentRollout.update({ where: { id }, data: { ...data[verb], updatedAt: now } });
      await audit(tx, by, `agent.rollout.${verb}d`.replace("eed", "ed"), id, correlationId, now, reason ? { reason } : {});
    });
    return this.get(id);
  }

  /** One step of the running rollout (the leader runs it). */
  async tick(): Promise<void> {
    await this.endSurges();
    const rollout = await this.deps.prisma.agentRollout.findFirst({ where: { state: "running" } });
    if (rollout === null) return;
    const views = await batchNodeViews(this.deps.prisma, rollout, (id) => this.deps.connectedHere(id));
    await this.apply(rollout, views, stepRollout(viewOf(rollout), views, this.deps.clock.now()));
  }

  /**
   * Ends the surges whose node is no longer waiting for or under its update (updated, failed,
   * skipped, or its rollout over): the deployment controller then drains the extra replica.
   */
  private async endSurges(): Promise<void> {
    const surged = await this.deps.prisma.deployment.findMany({
      where: { surgeForNodeId: { not: null } },
      select: { id: true, surgeForNodeId: true },
    });
    if (surged.length === 0) return;
    const nodeIds = [...new Set(surged.map((d) => d.surgeForNodeId as string))];
    const underway = await this.deps.prisma.agentRolloutNode.findMany({
      where: { nodeId: { in: nodeIds }, state: { in: ["pending", "updating"] }, rollout: { state: { in: ["running", "paused"] } } },
      select: { nodeId: true },
    });
    const still = new Set(underway.map((r) => r.nodeId));
    const over = surged.filter((d) => !still.has(d.surgeForNodeId as string)).map((d) => d.id);
    if (over.length > 0) await this.deps.prisma.deployment.updateMany({ where: { id: { in: over } }, data: { surgeForNodeId: null } });
  }

  private async apply(rollout: AgentRollout, views: NodeView[], step: Step): Promise<void> {
    const now = this.now();
    const name = new Map(views.map((v) => [v.id, v.name]));
    await this.deps.prisma.$transaction(async (tx) => {
      const setNodes = async (ids: string[], state: NodeState, extra: Prisma.AgentRolloutNodeUpdateManyMutationInput = {}) => {
        if (ids.length === 0) return;
        await tx.agentRolloutNode.updateMany({ where: { rolloutId: rollout.id, nodeId: { in: ids } }, data: { state, ...extra } });
        for (const id of ids)
          await audit(tx, { actor: systemActor, type: "node" }, `agent.update.${state}`, id, null, now, {
            rollout: rollout.id,
            node: name.get(id) ?? id,
          });
      };
      const setRollout = (data: Prisma.AgentRolloutUpdateInput) =>
        tx.agentRollout.update({ where: { id: rollout.id }, data: { ...data, updatedAt: now } });
      if (step.kind === "wait" || step.kind === "pause" || step.kind === "healthy") await setNodes(step.updated, "updated");
      if (step.kind === "wait") {
        for (const { nodeId, deployments } of step.surge) {
          await tx.deployment.updateMany({ where: { id: { in: deployments } }, data: { surgeForNodeId: nodeId } });
          await audit(tx, { actor: systemActor, type: "node" }, "agent.update.surge", nodeId, null, now, {
            rollout: rollout.id,
            node: name.get(nodeId) ?? nodeId,
            deployments: deployments.join(","),
          });
        }
        await setNodes(step.send, "updating", { sentAt: now });
        if (rollout.batchStartedAt === null) await setRollout({ batchStartedAt: now });
      } else if (step.kind === "pause") {
        await setRollout({ state: "paused", pausedReason: step.reason });
        await audit(tx, { actor: systemActor }, "agent.rollout.paused", rollout.id, null, now, { reason: step.reason });
      } else if (step.kind === "healthy") {
        await setRollout({ batchHealthyAt: now });
        await audit(tx, { actor: systemActor }, "agent.rollout.batch-healthy", rollout.id, null, now, {
          batch: String(rollout.currentBatch + 1),
        });
      } else if (step.kind === "advance") {
        await setRollout({ currentBatch: rollout.currentBatch + 1, batchStartedAt: null, batchHealthyAt: null });
      } else {
        await setRollout({ state: "completed" });
        await audit(tx, { actor: systemActor }, "agent.rollout.completed", rollout.id, null, now, {});
      }
    });
  }

  /** A node's session opened: record the outcome of the update it reports. */
  async reported(nodeId: string, report: { rolloutId: string; version: string; succeeded: boolean; reason: string }): Promise<void> {
    if (report.rolloutId === "") return;
    const now = this.now();
    await this.deps.prisma.$transaction(async (tx) => {
      const row = await tx.agentRolloutNode.findFirst({ where: { nodeId, rolloutId: report.rolloutId, state: "updating" } });
      if (row === null || report.succeeded) return;
      const reason = report.reason.slice(0, 1024) || "update failed";
      await tx.agentRolloutNode.updateMany({ where: { nodeId, rolloutId: report.rolloutId }, data: { state: "failed", reason } });
      await audit(tx, { actor: nodeActor(nodeId), type: "node" }, "agent.update.failed", nodeId, null, now, {
        rollout: report.rolloutId,
        version: report.version,
        reason,
      });
    });
  }
}

function viewOf(r: AgentRollout) {
  return {
    version: r.version,
    currentBatch: r.currentBatch,
    batches: r.batches,
    pauseBetweenMs: r.pauseBetweenMs,
    batchDeadlineMs: r.batchDeadlineMs,
    batchStartedAt: r.batchStartedAt?.getTime(),
    batchHealthyAt: r.batchHealthyAt?.getTime(),
  };
}

function rolloutRow(id: string, input: CreateRollout, s: RolloutSettings, batches: number, now: Date) {
  return {
    id,
    version: input.version,
    selector: input.selector,
    ...s,
    // A rollout with nothing to update is done at once.
    state: batches === 0 ? "completed" : "running",
    batches,
    createdAt: now,
    updatedAt: now,
  };
}

function audit(
  tx: Prisma.TransactionClient,
  target: AuditActor & { type?: "agent_rollout" | "node" },
  action: string,
  targetId: string,
  correlationId: string | null,
  at: Date,
  details: Record<string, string>,
) {
  const { actor, actorName, type = "agent_rollout" } = target;
  return recordAudit(tx, { actor, actorName, action, targetType: type, targetId, correlationId: correlationId ?? undefined, details }, at);
}
