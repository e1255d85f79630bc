// The node RPCs of modelforge.admin.v1.AdminService: register, list, show, watch, update,
// disable and enable, credentials, decommission (the admin token is checked by the interceptor
// before these run).
import { create, equals } from "@bufbuild/protobuf";
import { Code, ConnectError, type HandlerContext, type ServiceImpl } from "@connectrpc/connect";
import {
  type AdminService,
  DecommissionNodeResponseSchema,
  DisableNodeResponseSchema,
  EnableNodeResponseSchema,
  GetNodeResponseSchema,
  ListNodesResponseSchema,
  type Node as NodeMessage,
  NodeSchema,
  PreviewDecommissionResponseSchema,
  RegisterNodeResponseSchema,
  RevokeNodeCredentialResponseSchema,
  RotateNodeCredentialResponseSchema,
  type UpdateNodeRequest,
  UpdateNodeResponseSchema,
  WatchNodesResponseSchema,
} from "../../gen/proto/modelforge/admin/v1/admin_pb.js";
import type { Liveness as LivenessEnum } from "../../gen/proto/modelforge/common/v1/common_pb.js";
import type { Prisma } from "../../gen/prisma/client.js";
import { recordAudit, type AuditActor } from "../audit/audit.js";
import { actorIn } from "../identity/operators/principal.js";
import { callOf } from "../context.js";
import { tokenToProto } from "../identity/enrollment/codec.js";
import { registerNode } from "../identity/enrollment/register.js";
import { type TokenDeps, validateLabels } from "../identity/enrollment/tokens.js";
import { findNodeOrThrow } from "../identity/node-record.js";
import { decodeOffset, encodePageToken, pageSizeOf } from "../rpc/paging.js";
import { positiveDurationMs } from "../rpc/time.js";
import { livenessFromProto } from "./codec.js";
import { nodeDetail } from "./detail.js";
import {
  decommissionNode,
  type LifecycleDeps,
  previewDecommission,
  refuseDecommissioned,
  revokeCredential,
  rotateCredential,
  setNodeDisabled,
} from "./lifecycle.js";
import { nodeMessages, type ViewDeps } from "./view.js";

type Rpcs = ServiceImpl<typeof AdminService>;
type NodeReadRpcs = Pick<Rpcs, "listNodes" | "getNode" | "watchNodes">;
type NodeChangeRpcs = Pick<Rpcs, "registerNode" | "updateNode" | "disableNode" | "enableNode">;
type NodeCredentialRpcs = Pick<Rpcs, "rotateNodeCredential" | "revokeNodeCredential" | "previewDecommission" | "decommissionNode">;

/** What the node RPCs work with. */
export interface NodeAdminDeps extends Omit<TokenDeps, "sessions">, LifecycleDeps, Omit<ViewDeps, "sessions"> {
  /** How often WatchNodes looks for changes. */
  watchIntervalMs: number;
  /** Aborted when shutdown begins: watches end. */
  shutdown: AbortSignal;
}

const correlation = (ctx: HandlerContext) => callOf(ctx).correlationId;

export function adminNodes(deps: NodeAdminDeps): NodeReadRpcs & NodeChangeRpcs & NodeCredentialRpcs {
  return { ...nodeReads(deps), ...nodeChanges(deps), ...nodeCredentials(deps) };
}

function nodeReads(deps: NodeAdminDeps): NodeReadRpcs {
  return {
    async listNodes(req) {
      const size = pageSizeOf(req.pageSize);
      const offset = decodeOffset(req.pageToken);
      const all = await filteredNodes(deps, req.liveness, req.labels);
      const page = all.slice(offset, offset + size);
      return create(ListNodesResponseSchema, {
        nodes: page,
        nextPageToken: all.length > offset + size ? encodePageToken(String(offset + size)) : "",
      });
    },
    async getNode(req) {
      return create(GetNodeResponseSchema, await nodeDetail(deps, req.nodeId));
    },
    async *watchNodes(req, ctx) {
      // Polls the database rather than listening to this replica alone, so changes made through any
      // replica are seen; an unchanged node is not sent again.
      const sent = new Map<string, NodeMessage>();
      while (!ctx.signal.aborted && !deps.shutdown.aborted) {
        for (const node of await filteredNodes(deps, req.liveness, req.labels)) {
          const before = sent.get(node.id);
          if (before === undefined || !equals(NodeSchema, before, node)) {
            sent.set(node.id, node);
            yield create(WatchNodesResponseSchema, { node });
          }
        }
        await deps.clock.sleep(deps.watchIntervalMs, ctx.signal, deps.shutdown);
      }
    },
  };
}

function nodeChanges(deps: NodeAdminDeps): NodeChangeRpcs {
  return {
    async registerNode(req, ctx) {
      const r = await registerNode(deps, {
        name: req.name,
        labels: req.labels,
        ttlMs: req.ttl !== undefined ? positiveDurationMs(req.ttl) : undefined,
        correlationId: correlation(ctx),
        by: actorIn(ctx),
      });
      return create(RegisterNodeResponseSchema, {
        node: await oneNode(deps, r.nodeId),
        token: r.secret,
        enrollmentToken: tokenToProto(r.token, new Date(deps.clock.now())),
        joinCommand: r.joinCommand,
      });
    },
    async updateNode(req, ctx) {
      await updateNode(deps, req, correlation(ctx), actorIn(ctx));
      return create(UpdateNodeResponseSchema, { node: await oneNode(deps, req.nodeId) });
    },
    async disableNode(req, ctx) {
      await setNodeDisabled(deps, req.nodeId, true, req.reason, correlation(ctx), actorIn(ctx));
      return create(DisableNodeResponseSchema, { node: await oneNode(deps, req.nodeId) });
    },
    async enableNode(req, ctx) {
      await setNodeDisabled(deps, req.nodeId, false, "", correlation(ctx), actorIn(ctx));
      return create(EnableNodeResponseSchema, { node: await oneNode(deps, req.nodeId) });
    },
  };
}

function nodeCredentials(deps: NodeAdminDeps): NodeCredentialRpcs {
  return {
    async rotateNodeCredential(req, ctx) {
      const r = await rotateCredential(deps, req.nodeId, req.revokeCurrent, correlation(ctx), actorIn(ctx));
      return create(RotateNodeCredentialResponseSchema, r);
    },
    async revokeNodeCredential(req, ctx) {
      const serial = req.serial.trim().toUpperCase();
      const revoked = await revokeCredential(deps, req.nodeId, serial, req.reason, correlation(ctx), actorIn(ctx));
      return create(RevokeNodeCredentialResponseSchema, { revokedSerials: revoked });
    },
    async previewDecommission(req) {
      const p = await previewDecommission(deps, req.nodeId);
      return create(PreviewDecommissionResponseSchema, {
        node: (await nodeMessages(deps, [p.node]))[0]!.message,
        credentialSerials: p.credentialSerials,
        jobIds: p.jobIds,
        deploymentIds: p.deploymentIds,
      });
    },
    async decommissionNode(req, ctx) {
      const d = await decommissionNode(deps, req.nodeId, req.reason, correlation(ctx), actorIn(ctx));
      return create(DecommissionNodeResponseSchema, {
        node: (await nodeMessages(deps, [d.node]))[0]!.message,
        revokedSerials: d.revokedSerials,
        failedJobIds: d.failedJobIds,
        reclaimedDeploymentIds: d.deploymentIds,
      });
    },
  };
}

async function oneNode(deps: ViewDeps, id: string): Promise<NodeMessage> {
  return (await nodeMessages(deps, [await findNodeOrThrow(deps.prisma, id)]))[0]!.message;
}

/** The fields an UpdateNode request's mask names, checked. */
function nodeUpdateOf(req: Pick<UpdateNodeRequest, "updateMask" | "name" | "labels">): Prisma.NodeUpdateInput {
  const paths = req.updateMask?.paths ?? [];
  const unknown = paths.filter((p) => p !== "name" && p !== "labels");
  if (paths.length === 0) throw new ConnectError("update_mask must name name and/or labels", Code.InvalidArgument);
  if (unknown.length > 0) throw new ConnectError(`update_mask: cannot update ${unknown.join(", ")}`, Code.InvalidArgument);
  const data: Prisma.NodeUpdateInput = {};
  if (paths.includes("name")) {
    if (req.name.trim() === "" || req.name.length > 128) {
      throw new ConnectError("name must be 1 to 128 characters", Code.InvalidArgument);
    }
    data.name = req.name.trim();
  }
  if (paths.includes("labels")) {
    validateLabels(req.labels);
    data.labels = req.labels;
  }
  return data;
}

async function updateNode(
  deps: Pick<NodeAdminDeps, "prisma">,
  req: UpdateNodeRequest,
  correlationId: string,
  by: AuditActor,
): Promise<void> {
  const data = nodeUpdateOf(req);
  await deps.prisma.$transaction(async (tx) => {
    const node = await findNodeOrThrow(tx, req.nodeId);
    refuseDecommissioned(node); // terminal: kept as it was when it left the fleet
    await tx.node.update({ where: { id: node.id }, data });
    await recordAudit(tx, {
      ...by,
      action: "node.updated",
      targetType: "node",
      targetId: node.id,
      correlationId,
      details: {
        fields: (req.updateMask?.paths ?? []).join(","),
        // What placement follows: the labels before and after, so the audit says why replicas moved.
        ...(data.labels !== undefined ? { labelsBefore: JSON.stringify(node.labels ?? {}), labels: JSON.stringify(data.labels) } : {}),
      },
    });
  });
}

async function filteredNodes(deps: ViewDeps, liveness: LivenessEnum[], labels: Record<string, string>): Promise<NodeMessage[]> {
  const wanted = new Set(
    liveness.map((l) => {
      const name = livenessFromProto(l);
      if (name === undefined) throw new ConnectError(`liveness filter: unknown value ${l}`, Code.InvalidArgument);
      return name;
    }),
  );
  const labelFilters = Object.entries(labels).map(([k, v]) => ({ labels: { path: [k], equals: v } }));
  const nodes = await deps.prisma.node.findMany({
    where: labelFilters.length > 0 ? { AND: labelFilters } : {},
    orderBy: [{ name: "asc" }, { id: "asc" }],
  });
  return (await nodeMessages(deps, nodes)).filter((n) => wanted.size === 0 || wanted.has(n.view.liveness)).map((n) => n.message);
}
