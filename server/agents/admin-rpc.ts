// The agent upgrade RPCs of modelforge.admin.v1.AdminService (the admin token is checked by the
// interceptor before these run): releases and rollouts.
import { create } from "@bufbuild/protobuf";
import { durationFromMs } from "@bufbuild/protobuf/wkt";
import { Code, ConnectError, type HandlerContext, type ServiceImpl } from "@connectrpc/connect";
import type { AdminService } from "../../gen/proto/modelforge/admin/v1/admin_pb.js";
import {
  AbortAgentRolloutResponseSchema,
  AgentReleaseSchema,
  AgentRolloutSchema,
  CreateAgentReleaseResponseSchema,
  CreateAgentRolloutResponseSchema,
  GetAgentRolloutResponseSchema,
  ListAgentReleasesResponseSchema,
  ListAgentRolloutsResponseSchema,
  PauseAgentRolloutResponseSchema,
  ResumeAgentRolloutResponseSchema,
  RolloutCountsSchema,
  RolloutNodeSchema,
  RolloutNodeState,
  RolloutState,
} from "../../gen/proto/modelforge/admin/v1/agent_upgrades_pb.js";
import type { AgentRelease } from "../../gen/prisma/client.js";
import { callOf } from "../context.js";
import { actorIn } from "../identity/operators/principal.js";
import { stringMap, ts } from "../rpc/convert.js";
import type { AgentReleases } from "./releases.js";
import type { AgentRollouts, RolloutWithNodes } from "./rollouts.js";

type UpgradeRpcs = Pick<
  ServiceImpl<typeof AdminService>,
  | "createAgentRelease"
  | "listAgentReleases"
  | "createAgentRollout"
  | "listAgentRollouts"
  | "getAgentRollout"
  | "pauseAgentRollout"
  | "resumeAgentRollout"
  | "abortAgentRollout"
>;

const rolloutStates: Record<string, RolloutState> = {
  running: RolloutState.RUNNING,
  paused: RolloutState.PAUSED,
  completed: RolloutState.COMPLETED,
  aborted: RolloutState.ABORTED,
};
const nodeStates: Record<string, RolloutNodeState> = {
  pending: RolloutNodeState.PENDING,
  updating: RolloutNodeState.UPDATING,
  updated: RolloutNodeState.UPDATED,
  failed: RolloutNodeState.FAILED,
  skipped: RolloutNodeState.SKIPPED,
};

function releaseProto(r: AgentRelease) {
  return create(AgentReleaseSchema, {
    version: r.version,
    platform: r.platform,
    sha256: r.sha256,
    sizeBytes: r.sizeBytes,
    signed: r.signature !== null,
    createdAt: ts(r.createdAt),
    ...(r.signature !== null ? { signature: new Uint8Array(r.signature) } : {}),
  });
}

function rolloutProto(r: RolloutWithNodes, names: Map<string, string> | undefined) {
  const count = (state: string) => r.nodes.filter((n) => n.state === state).length;
  return create(AgentRolloutSchema, {
    id: r.id,
    version: r.version,
    selector: stringMap(r.selector),
    batchPercent: r.batchPercent,
    pauseBetween: durationFromMs(r.pauseBetweenMs),
    batchDeadline: durationFromMs(r.batchDeadlineMs),
    state: rolloutStates[r.state] ?? RolloutState.UNSPECIFIED,
    pausedReason: r.pausedReason ?? "",
    currentBatch: r.currentBatch,
    batches: r.batches,
    counts: create(RolloutCountsSchema, {
      pending: count("pending"),
      updating: count("updating"),
      updated: count("updated"),
      failed: count("failed"),
      skipped: count("skipped"),
    }),
    createdAt: ts(r.createdAt),
    updatedAt: ts(r.updatedAt),
    nodes:
      names === undefined
        ? []
        : [...r.nodes]
            .sort((a, b) => a.batch - b.batch || (names.get(a.nodeId) ?? "").localeCompare(names.get(b.nodeId) ?? ""))
            .map((n) =>
              create(RolloutNodeSchema, {
                nodeId: n.nodeId,
                nodeName: names.get(n.nodeId) ?? "",
                batch: n.batch,
                state: nodeStates[n.state] ?? RolloutNodeState.UNSPECIFIED,
                fromVersion: n.fromVersion,
                reason: n.reason ?? "",
              }),
            ),
  });
}

const uuidPattern = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;

function rolloutId(id: string): string {
  if (!uuidPattern.test(id)) throw new ConnectError("rollout_id: must be a UUID (8-4-4-4-12 lowercase hex digits)", Code.InvalidArgument);
  return id;
}

export function adminUpgrades(deps: {
  releases: AgentReleases;
  rollouts: AgentRollouts;
  nodeNames(ids: string[]): Promise<Map<string, string>>;
}): UpgradeRpcs {
  const { releases, rollouts } = deps;
  const detailed = async (r: RolloutWithNodes) => rolloutProto(r, await deps.nodeNames(r.nodes.map((n) => n.nodeId)));
  const change = async (verb: "pause" | "resume" | "abort", req: { rolloutId: string; reason: string }, ctx: HandlerContext) =>
    detailed(await rollouts.change(rolloutId(req.rolloutId), verb, req.reason, callOf(ctx).correlationId, actorIn(ctx)));
  return {
    async createAgentRelease(req, ctx) {
      const { release, created } = await releases.create(req, callOf(ctx).correlationId, actorIn(ctx));
      return create(CreateAgentReleaseResponseSchema, { release: releaseProto(release), created });
    },
    async listAgentReleases() {
      return create(ListAgentReleasesResponseSchema, { releases: (await releases.list()).map(releaseProto) });
    },
    async createAgentRollout(req, ctx) {
      const row = await rollouts.create(
        { version: req.version, selector: req.selector, settings: req },
        callOf(ctx).correlationId,
        actorIn(ctx),
      );
      return create(CreateAgentRolloutResponseSchema, { rollout: await detailed(row) });
    },
    async listAgentRollouts() {
      return create(ListAgentRolloutsResponseSchema, { rollouts: (await rollouts.list()).map((r) => rolloutProto(r, undefined)) });
    },
    async getAgentRollout(req) {
      return create(GetAgentRolloutResponseSchema, { rollout: await detailed(await rollouts.get(rolloutId(req.rolloutId))) });
    },
    async pauseAgentRollout(req, ctx) {
      return create(PauseAgentRolloutResponseSchema, { rollout: await change("pause", req, ctx) });
    },
    async resumeAgentRollout(req, ctx) {
      return create(ResumeAgentRolloutResponseSchema, { rollout: await change("resume", req, ctx) });
    },
    async abortAgentRollout(req, ctx) {
      return create(AbortAgentRolloutResponseSchema, { rollout: await change("abort", req, ctx) });
    },
  };
}
