// ListAuditEvents of modelforge.admin.v1.AdminService: newest first, filtered by action, target,
// actor (or a user's email) and time (the caller is checked by the interceptor before it runs).
import { create } from "@bufbuild/protobuf";
import { timestampDate } from "@bufbuild/protobuf/wkt";
import type { ServiceImpl } from "@connectrpc/connect";
import { type AdminService, AuditEventSchema, ListAuditEventsResponseSchema } from "../../gen/proto/modelforge/admin/v1/admin_pb.js";
import type { AuditEvent, PrismaClient } from "../../gen/prisma/client.js";
import { stringMap, ts } from "../rpc/convert.js";
import { decodeSeq, encodePageToken, pageSizeOf, splitPage } from "../rpc/paging.js";

const toProto = (e: AuditEvent) =>
  create(AuditEventSchema, {
    id: e.id,
    time: ts(e.time),
    actor: e.actor,
    actorName: e.actorName ?? "",
    action: e.action,
    targetType: e.targetType,
    targetId: e.targetId,
    correlationId: e.correlationId ?? "",
    details: stringMap(e.details),
  });

export function adminAudit(prisma: PrismaClient): Pick<ServiceImpl<typeof AdminService>, "listAuditEvents"> {
  return {
    async listAuditEvents(req) {
      const size = pageSizeOf(req.pageSize);
      const before = decodeSeq(req.pageToken);
      const rows = await prisma.auditEvent.findMany({
        where: {
          ...(before !== undefined ? { seq: { lt: before } } : {}),
          ...(req.action ? { action: req.action } : {}),
          ...(req.targetId ? { targetId: req.targetId } : {}),
          // By actor ("user:<uuid>", "break-glass", ...) or, for a user, by email.
          ...(req.actor ? actorFilter(req.actor) : {}),
          ...(req.since ? { time: { gte: timestampDate(req.since) } } : {}),
        },
        orderBy: { seq: "desc" },
        take: size + 1,
      });
      const { page, more } = splitPage(rows, size);
      return create(ListAuditEventsResponseSchema, {
        events: page.map(toProto),
        nextPageToken: more ? encodePageToken(String(page[page.length - 1]!.seq)) : "",
      });
    },
  };
}

/** By actor ("user:<uuid>", "break-glass", ...), or by a user's email, with or without a personal token. */
function actorFilter(actor: string) {
  if (!actor.includes("@")) return { actor };
  return { OR: [{ actorName: actor }, { actorName: { startsWith: `${actor} ` } }] };
}
