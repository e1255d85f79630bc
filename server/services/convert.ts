// Database rows to API messages. Secrets never leave: token rows carry only their hash, which is
// not mapped either.
import { create, fromJson, type JsonValue } from "@bufbuild/protobuf";
import { timestampFromDate, type Timestamp } from "@bufbuild/protobuf/wkt";
import {
  AuditEventSchema,
  CredentialSchema,
  EnrollmentTokenSchema,
  EnrollmentTokenState,
  NodeSchema,
  type Node as NodeMessage,
} from "../../gen/proto/modelforge/admin/v1/admin_pb.js";
import { HostInfoSchema, Liveness as LivenessEnum } from "../../gen/proto/modelforge/common/v1/common_pb.js";
import type { AuditEvent, EnrollmentToken, Node, NodeCredential } from "../../gen/prisma/client.js";
import { tokenState } from "../identity/enrollment/token.js";
import type { Liveness } from "../liveness/rules.js";

export const ts = (d: Date | null | undefined): Timestamp | undefined => (d ? timestampFromDate(d) : undefined);

const livenessEnum: Record<Liveness, LivenessEnum> = {
  pending: LivenessEnum.PENDING,
  online: LivenessEnum.ONLINE,
  stale: LivenessEnum.STALE,
  offline: LivenessEnum.OFFLINE,
  disabled: LivenessEnum.DISABLED,
  decommissioned: LivenessEnum.DECOMMISSIONED,
};
export const livenessToProto = (l: Liveness): LivenessEnum => livenessEnum[l];
export const livenessFromProto = (l: LivenessEnum): Liveness | undefined =>
  (Object.keys(livenessEnum) as Liveness[]).find((k) => livenessEnum[k] === l);

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

export interface NodeView {
  liveness: Liveness;
  lastHeartbeatAt: Date | null;
  connected: boolean;
  /** The replica holding the node's session, "" when none is known. */
  sessionReplica: string;
  gpuCount: number;
  /** The recorded agent version is older than the oldest this server accepts. */
  agentOutdated: boolean;
}

export function nodeToProto(n: Node, view: NodeView): NodeMessage {
  return create(NodeSchema, {
    id: n.id,
    name: n.name,
    labels: stringMap(n.labels),
    liveness: livenessToProto(view.liveness),
    lastHeartbeatAt: ts(view.lastHeartbeatAt),
    createdAt: ts(n.createdAt),
    agentVersion: n.agentVersion ?? "",
    protocolVersion: n.protocolVersion ?? 0,
    capabilities: n.capabilities,
    engines: n.engines,
    host: n.host !== null ? fromJson(HostInfoSchema, n.host as JsonValue, { ignoreUnknownFields: true }) : undefined,
    gpuCount: view.gpuCount,
    connected: view.connected,
    sessionReplica: view.sessionReplica,
    disabledReason: n.disabledAt !== null ? (n.disabledReason ?? "disabled") : "",
    decommissionedAt: ts(n.decommissionedAt),
    agentOutdated: view.agentOutdated,
  });
}

export function credentialToProto(c: NodeCredential) {
  return create(CredentialSchema, {
    serial: c.serial,
    issuedAt: ts(c.issuedAt),
    expiresAt: ts(c.expiresAt),
    revokedAt: ts(c.revokedAt),
    revokedReason: c.revokedReason ?? "",
  });
}

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

export function stringMap(json: unknown): Record<string, string> {
  const out: Record<string, string> = {};
  if (json !== null && typeof json === "object" && !Array.isArray(json)) {
    for (const [k, v] of Object.entries(json)) if (typeof v === "string") out[k] = v;
  }
  return out;
}
