// Audit events: who did what to which thing, under which request. Written in the same transaction
// as the change they describe, so an audited action and its record cannot come apart.
import { randomUUID } from "node:crypto";
import type { Prisma } from "../../gen/prisma/client.js";

export type AuditWriter = Pick<Prisma.TransactionClient, "auditEvent">;

/** Who did something: "user:<uuid>", "break-glass", "node:<uuid>", "system" or "autoscaler". */
export interface AuditActor {
  actor: string;
  /** Readably: a user's email (and the personal token's name, when one was used). */
  actorName?: string | undefined;
}

/** A request as its audit names it: who asked, under which correlation id. */
export interface Asked extends AuditActor {
  correlationId: string;
}

export interface AuditEntry extends AuditActor {
  /** e.g. "node.enrolled", "credential.revoked". */
  action: string;
  targetType:
    | "node"
    | "credential"
    | "enrollment_token"
    | "job"
    | "gpu"
    | "deployment"
    | "artifact"
    | "runtime_profile"
    | "service_key"
    | "agent_release"
    | "agent_rollout"
    | "user"
    | "personal_token";
  targetId: string;
  correlationId?: string | undefined;
  /** Never a secret. */
  details?: Record<string, string>;
}

export async function recordAudit(db: AuditWriter, entry: AuditEntry, at: Date = new Date()): Promise<void> {
  await db.auditEvent.create({ data: auditRow(entry, at) });
}

/** Several events in one statement: all of them are written, or none. */
export async function recordAudits(db: AuditWriter, entries: AuditEntry[], at: Date = new Date()): Promise<void> {
  await db.auditEvent.createMany({ data: entries.map((entry) => auditRow(entry, at)) });
}

function auditRow(entry: AuditEntry, at: Date) {
  return {
    id: randomUUID(),
    time: at,
    actor: entry.actor,
    actorName: entry.actorName ?? null,
    action: entry.action,
    targetType: entry.targetType,
    targetId: entry.targetId,
    correlationId: entry.correlationId ?? null,
    details: entry.details ?? {},
  };
}

export const systemActor = "system";
/** The control plane changing a deployment's wanted replicas by its load. */
export const autoscalerActor = "autoscaler";
export const nodeActor = (nodeId: string) => `node:${nodeId}`;
