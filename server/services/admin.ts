// modelforge.admin.v1.AdminService. The admin token is checked by the interceptor before any of
// these run; handlers translate between messages and the lifecycle modules.
import { Code, ConnectError, type HandlerContext, type ServiceImpl } from "@connectrpc/connect";
import { create, equals } from "@bufbuild/protobuf";
import { timestampDate, positiveDurationMs } from "../rpc/time.js";
import {
  type AdminService,
  CreateEnrollmentTokenResponseSchema,
  ListEnrollmentTokensResponseSchema,
  RevokeEnrollmentTokenResponseSchema,
  ListNodesResponseSchema,
  GetNodeResponseSchema,
  WatchNodesResponseSchema,
  UpdateNodeResponseSchema,
  DisableNodeResponseSchema,
  EnableNodeResponseSchema,
  RotateNodeCredentialResponseSchema,
  RevokeNodeCredentialResponseSchema,
  PreviewDecommissionResponseSchema,
  DecommissionNodeResponseSchema,
  ListAuditEventsResponseSchema,
  NodeSchema,
  type Node as NodeMessage,
  GetOperatorRoleResponseSchema,
  OperatorRole,
  RegisterNodeResponseSchema,
} from "../../gen/proto/modelforge/admin/v1/admin_pb.js";
import { operatorRoleIn } from "../identity/admin-token.js";
import { registerNode } from "../identity/enrollment/register.js";
import type { Liveness as LivenessEnum } from "../../gen/proto/modelforge/common/v1/common_pb.js";
import { callOf } from "../context.js";
import {
  createEnrollmentToken,
  listEnrollmentTokens,
  revokeEnrollmentToken,
  validateLabels,
  type TokenDeps,
} from "../identity/enrollment/tokens.js";
import {
  decommissionNode,
  refuseDecommissioned,
  previewDecommission,
  revokeCredential,
  rotateCredential,
  setNodeDisabled,
  type LifecycleDeps,
} from "../nodes/lifecycle.js";
import { nodeMessages, type ViewDeps } from "../nodes/view.js";
import { findNodeOrThrow } from "../identity/node-record.js";
import { nodeDetail } from "../nodes/detail.js";
import { livenessFromProto } from "../nodes/codec.js";
import { tokenToProto } from "../identity/enrollment/codec.js";
import { auditToProto } from "../audit/codec.js";
import { decodeOffset, decodeSeq, encodePageToken, pageSizeOf, splitPage } from "../rpc/paging.js";
import { recordAudit, operatorActor } from "../audit/audit.js";
import type { Prisma } from "../../gen/prisma/client.js";

/** What the operator API works with. */
export interface AdminServiceDeps extends Omit<TokenDeps, "sessions">, LifecycleDeps, Omit<ViewDeps, "sessions"> {
  /** How often WatchNodes looks for changes. */
  watchIntervalMs: number;
  /** Aborted when shutdown begins: watches end. */
  shutdown: AbortSignal;
}

/** The admin RPCs this module implements itself; every other feature brings its own. */
type CoreRpcs =
  | "createEnrollmentToken"
  | "listEnrollmentTokens"
  | "revokeEnrollmentToken"
  | "listNodes"
  | "getNode"
  | "watchNodes"
  | "updateNode"
  | "disableNode"
  | "enableNode"
  | "rotateNodeCredential"
  | "revokeNodeCredential"
  | "previewDecommission"
  | "decommissionNode"
  | "listAuditEvents"
  | "getOperatorRole"
  | "registerNode";

/** The features' RPCs (jobs, artifacts, runtime profiles, ...): together, exactly the rest. */
export type FeatureRpcs = Omit<ServiceImpl<typeof AdminService>, CoreRpcs>;

export function adminService(deps: AdminServiceDeps, features: FeatureRpcs): ServiceImpl<typeof AdminService> {
  const prisma = deps.prisma;
  const correlation = (ctx: HandlerContext) => callOf(ctx).correlationId;
  const oneNode = async (id: string) => (await nodeMessages(deps, [await findNodeOrThrow(prisma, id)]))[0]!.message;

  return {
    async createEnrollmentToken(req, ctx) {
      const created = await createEnrollmentToken(deps, {
        nodeName: req.nodeName,
        nodeId: req.nodeId,
        ttlMs: req.ttl !== undefined ? positiveDurationMs(req.ttl) : undefined,
        labels: req.labels,
        correlationId: correlation(ctx),
      });
      return create(CreateEnrollmentTokenResponseSchema, {
        token: created.secret,
        enrollmentToken: tokenToProto(created.token, new Date(deps.clock.now())),
        joinCommand: created.joinCommand,
      });
    },
    async listEnrollmentTokens(req) {
      const size = pageSizeOf(req.pageSize);
      const offset = decodeOffset(req.pageToken);
      const { page, more } = splitPage(await listEnrollmentTokens(deps, size, offset), size);
      return create(ListEnrollmentTokensResponseSchema, {
        enrollmentTokens: page.map((t) => tokenToProto(t, new Date(deps.clock.now()))),
        nextPageToken: more ? encodePageToken(String(offset + size)) : "",
      });
    },
    async revokeEnrollmentToken(req, ctx) {
      const token = await revokeEnrollmentToken(deps, req.id, correlation(ctx));
      return create(RevokeEnrollmentTokenResponseSchema, { enrollmentToken: tokenToProto(token, new Date(deps.clock.now())) });
    },
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
    async updateNode(req, ctx) {
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
      await prisma.$transaction(async (tx) => {
        const node = await findNodeOrThrow(tx, req.nodeId);
        refuseDecommissioned(node); // terminal: kept as it was when it left the fleet
        await tx.node.update({ where: { id: node.id }, data });
        await recordAudit(tx, {
          actor: operatorActor,
          action: "node.updated",
          targetType: "node",
          targetId: node.id,
          correlationId: correlation(ctx),
          details: { fields: paths.join(",") },
        });
      });
      return create(UpdateNodeResponseSchema, { node: await oneNode(req.nodeId) });
    },
    async disableNode(req, ctx) {
      await setNodeDisabled(deps, req.nodeId, true, req.reason, correlation(ctx));
      return create(DisableNodeResponseSchema, { node: await oneNode(req.nodeId) });
    },
    async enableNode(req, ctx) {
      await setNodeDisabled(deps, req.nodeId, false, "", correlation(ctx));
      return create(EnableNodeResponseSchema, { node: await oneNode(req.nodeId) });
    },
    async rotateNodeCredential(req, ctx) {
      const r = await rotateCredential(deps, req.nodeId, req.revokeCurrent, correlation(ctx));
      return create(RotateNodeCredentialResponseSchema, r);
    },
    async revokeNodeCredential(req, ctx) {
      const serial = req.serial.trim().toUpperCase();
      const revoked = await revokeCredential(deps, req.nodeId, serial, req.reason, correlation(ctx));
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
      const d = await decommissionNode(deps, req.nodeId, req.reason, correlation(ctx));
      return create(DecommissionNodeResponseSchema, {
        node: (await nodeMessages(deps, [d.node]))[0]!.message,
        revokedSerials: d.revokedSerials,
        failedJobIds: d.failedJobIds,
        reclaimedDeploymentIds: d.deploymentIds,
      });
    },
    async listAuditEvents(req) {
      const size = pageSizeOf(req.pageSize);
      const before = decodeSeq(req.pageToken);
      const rows = await prisma.auditEvent.findMany({
        where: {
          ...(before !== undefined ? { seq: { lt: before } } : {}),
          ...(req.action ? { action: req.action } : {}),
          ...(req.targetId ? { targetId: req.targetId } : {}),
          ...(req.actor ? { actor: req.actor } : {}),
          ...(req.since ? { time: { gte: timestampDate(req.since) } } : {}),
        },
        orderBy: { seq: "desc" },
        take: size + 1,
      });
      const { page, more } = splitPage(rows, size);
      return create(ListAuditEventsResponseSchema, {
        events: page.map(auditToProto),
        nextPageToken: more ? encodePageToken(String(page[page.length - 1]!.seq)) : "",
      });
    },
    async getOperatorRole(_req, ctx) {
      const role = operatorRoleIn(ctx) === "admin" ? OperatorRole.ADMIN : OperatorRole.READ_ONLY;
      return create(GetOperatorRoleResponseSchema, { role });
    },
    async registerNode(req, ctx) {
      const r = await registerNode(deps, {
        name: req.name,
        labels: req.labels,
        ttlMs: req.ttl !== undefined ? positiveDurationMs(req.ttl) : undefined,
        correlationId: correlation(ctx),
      });
      return create(RegisterNodeResponseSchema, {
        node: await oneNode(r.nodeId),
        token: r.secret,
        enrollmentToken: tokenToProto(r.token, new Date(deps.clock.now())),
        joinCommand: r.joinCommand,
      });
    },
    ...features,
  };
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
