// Audit event rows to API messages.
import { create } from "@bufbuild/protobuf";
import { AuditEventSchema } from "../../gen/proto/modelforge/admin/v1/admin_pb.js";
import type { AuditEvent } from "../../gen/prisma/client.js";
import { stringMap, ts } from "../rpc/convert.js";

export function auditToProto(e: AuditEvent) {
  return create(AuditEventSchema, {
    id: e.id,
    time: ts(e.time),
    actor: e.actor,
    action: e.action,
    targetType: e.targetType,
    targetId: e.targetId,
    correlationId: e.correlationId ?? "",
    details: stringMap(e.details),
  });
}
