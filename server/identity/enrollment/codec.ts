// Enrollment token rows to API messages. The secret never leaves: a row carries only its hash,
// which is not mapped either.
import { create } from "@bufbuild/protobuf";
import { EnrollmentTokenSchema, EnrollmentTokenState } from "../../../gen/proto/modelforge/admin/v1/admin_pb.js";
import type { EnrollmentToken } from "../../../gen/prisma/client.js";
import { stringMap, ts } from "../../rpc/convert.js";
import { tokenState } from "./token.js";

const tokenStateEnum = {
  active: EnrollmentTokenState.ACTIVE,
  used: EnrollmentTokenState.USED,
  revoked: EnrollmentTokenState.REVOKED,
  expired: EnrollmentTokenState.EXPIRED,
} as const;

export function tokenToProto(t: EnrollmentToken, now: Date) {
  return create(EnrollmentTokenSchema, {
    id: t.id,
    nodeName: t.nodeName ?? "",
    nodeId: t.nodeId ?? "",
    createdAt: ts(t.createdAt),
    expiresAt: ts(t.expiresAt),
    usedAt: ts(t.usedAt),
    revokedAt: ts(t.revokedAt),
    state: tokenStateEnum[tokenState(t, now)],
    labels: stringMap(t.labels),
  });
}
