// Node and credential rows to API messages. Secrets never leave: credential rows carry no key.
import { create, fromJson, type JsonValue } from "@bufbuild/protobuf";
import { CredentialSchema, NodeSchema, type Node as NodeMessage } from "../../gen/proto/modelforge/admin/v1/admin_pb.js";
import { HostInfoSchema, Liveness as LivenessEnum } from "../../gen/proto/modelforge/common/v1/common_pb.js";
import type { Node, NodeCredential } from "../../gen/prisma/client.js";
import type { Liveness } from "../liveness/rules.js";
import { stringMap, ts } from "../rpc/convert.js";

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
