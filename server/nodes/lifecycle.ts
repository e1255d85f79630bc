// Node and credential lifecycle: renewal, rotation, revocation, disable, enable, decommission.
// Each change and its audit event commit together; open streams are closed after the commit.
import { Code, ConnectError } from "@connectrpc/connect";
import { CsrError } from "../identity/pki/ca.js";
import { recordAudit, nodeActor, type AuditActor } from "../audit/audit.js";
import type { Prisma, PrismaClient } from "../../gen/prisma/client.js";
import type { Clock } from "../../common/clock.js";
import type { Ca, IssuedNodeCertificate } from "../identity/pki/ca.js";
import type { NodeSessions } from "../node-sessions.js";
import type { NodeIdentity } from "../identity/node-auth.js";
import { findNodeOrThrow } from "../identity/node-record.js";
import { pushRenewal } from "./instructions.js";

type Tx = Prisma.TransactionClient;

/** What node and credential lifecycle changes work with. */
export interface LifecycleDeps {
  prisma: PrismaClient;
  clock: Clock;
  /** Streams of revoked, disabled and decommissioned nodes are ended here; renewals pushed. */
  sessions: Pick<NodeSessions, "get" | "isConnected" | "closeNode" | "closeSerials">;
}

/** Renewal also issues a certificate. */
export interface RenewalDeps extends Pick<LifecycleDeps, "prisma" | "clock"> {
  ca: Pick<Ca, "issueNodeCertificate">;
  credentialTtlMs: number;
}

export function refuseDecommissioned(node: { decommissionedAt: Date | null; id: string }): void {
  if (node.decommissionedAt !== null) {
    throw new ConnectError(`node ${node.id} is decommissioned`, Code.FailedPrecondition);
  }
}

async function revokeActive(tx: Tx, nodeId: string, reason: string, now: Date, serial?: string): Promise<string[]> {
  const where = { nodeId, revokedAt: null, ...(serial !== undefined ? { serial } : {}) };
  const active = await tx.nodeCredential.findMany({ where, select: { serial: true } });
  if (active.length > 0) {
    await tx.nodeCredential.updateMany({ where, data: { revokedAt: now, revokedReason: reason } });
  }
  return active.map((c) => c.serial);
}

/** RenewCredential: a fresh certificate for a fresh key; the calling one is revoked in the same step. */
export async function renewCredential(deps: RenewalDeps, identity: NodeIdentity, csrPem: string, correlationId: string) {
  const now = new Date(deps.clock.now());
  let issued: IssuedNodeCertificate;
  try {
    issued = await deps.ca.issueNodeCertificate(csrPem, identity.nodeId, { validityMs: deps.credentialTtlMs, now });
  } catch (err) {
    if (err instanceof CsrError) throw new ConnectError(`csr_pem: ${err.message}`, Code.InvalidArgument);
    throw err;
  }
  await deps.prisma.$transaction(async (tx) => {
    const old = await tx.nodeCredential.updateMany({
      where: { serial: identity.serial, nodeId: identity.nodeId, revokedAt: null },
      data: { revokedAt: now, revokedReason: "renewed" },
    });
    // Two renewals racing on one credential: only the first gets a certificate.
    if (old.count !== 1) throw new ConnectError("credential already renewed or revoked", Code.Aborted);
    await tx.nodeCredential.create({
      data: { serial: issued.serial, nodeId: identity.nodeId, issuedAt: now, expiresAt: issued.notAfter },
    });
    await tx.node.update({ where: { id: identity.nodeId }, data: { renewalRequestedAt: null, renewalReason: null } });
    await recordAudit(tx, {
      actor: nodeActor(identity.nodeId),
      action: "credential.renewed",
      targetType: "node",
      targetId: identity.nodeId,
      correlationId,
      details: { previousSerial: identity.serial, serial: issued.serial },
    });
  });
  return issued;
}

/** RotateNodeCredential: ask the node to renew now; optionally revoke the current credential at once. */
export async function rotateCredential(deps: LifecycleDeps, nodeId: string, revokeCurrent: boolean, correlationId: string, by: AuditActor) {
  const now = new Date(deps.clock.now());
  const revoked = await deps.prisma.$transaction(async (tx) => {
    const node = await findNodeOrThrow(tx, nodeId);
    refuseDecommissioned(node);
    const reason = "rotation requested by operator";
    await tx.node.update({ where: { id: node.id }, data: { renewalRequestedAt: now, renewalReason: reason } });
    const serials = revokeCurrent ? await revokeActive(tx, node.id, "revoked by rotation", now) : [];
    await recordAudit(tx, {
      ...by,
      action: "credential.rotation_requested",
      targetType: "node",
      targetId: node.id,
      correlationId,
      details: { revokeCurrent: String(revokeCurrent), revokedSerials: serials.join(",") },
    });
    return serials;
  });
  const id = nodeId.toLowerCase();
  if (revoked.length > 0) {
    deps.sessions.closeSerials(revoked, new ConnectError("credential revoked", Code.Unauthenticated));
    return { delivered: false, revokedSerials: revoked };
  }
  const delivered = pushRenewal(deps.sessions, id, "rotation requested by operator");
  return { delivered, revokedSerials: revoked };
}

/** RevokeNodeCredential: immediate, including on open streams. */
export async function revokeCredential(
  deps: LifecycleDeps,
  nodeId: string,
  serial: string,
  reason: string,
  correlationId: string,
  by: AuditActor,
) {
  const now = new Date(deps.clock.now());
  const revoked = await deps.prisma.$transaction(async (tx) => {
    const node = await findNodeOrThrow(tx, nodeId);
    if (serial !== "") {
      const cred = await tx.nodeCredential.findUnique({ where: { serial } });
      if (cred === null || cred.nodeId !== node.id) {
        throw new ConnectError(`credential ${serial} not found on node ${node.id}`, Code.NotFound);
      }
    }
    const serials = await revokeActive(tx, node.id, reason || "revoked by operator", now, serial || undefined);
    for (const s of serials) {
      await recordAudit(tx, {
        ...by,
        action: "credential.revoked",
        targetType: "credential",
        targetId: s,
        correlationId,
        details: { nodeId: node.id, reason: reason || "revoked by operator" },
      });
    }
    return serials;
  });
  deps.sessions.closeSerials(revoked, new ConnectError("credential revoked", Code.Unauthenticated));
  return revoked;
}

export async function setNodeDisabled(
  deps: LifecycleDeps,
  nodeId: string,
  disabled: boolean,
  reason: string,
  correlationId: string,
  by: AuditActor,
) {
  const node = await deps.prisma.$transaction(async (tx) => {
    const node = await findNodeOrThrow(tx, nodeId);
    refuseDecommissioned(node);
    const updated = await tx.node.update({
      where: { id: node.id },
      data: disabled
        ? { disabledAt: node.disabledAt ?? new Date(deps.clock.now()), disabledReason: reason || null }
        : { disabledAt: null, disabledReason: null },
    });
    await recordAudit(tx, {
      ...by,
      action: disabled ? "node.disabled" : "node.enabled",
      targetType: "node",
      targetId: node.id,
      correlationId,
      details: disabled && reason ? { reason } : {},
    });
    return updated;
  });
  if (disabled) deps.sessions.closeNode(node.id, new ConnectError("node disabled", Code.PermissionDenied));
  return node;
}

const unfinishedJobStates = ["pending", "leased"];
const liveDeploymentStates = ["loading", "ready", "draining"];

export async function previewDecommission(deps: Pick<LifecycleDeps, "prisma">, nodeId: string) {
  const prisma = deps.prisma;
  const node = await findNodeOrThrow(prisma, nodeId);
  const [credentials, jobs, deployments] = await Promise.all([
    prisma.nodeCredential.findMany({ where: { nodeId: node.id, revokedAt: null }, select: { serial: true } }),
    prisma.job.findMany({ where: { nodeId: node.id, state: { in: unfinishedJobStates } }, select: { id: true } }),
    prisma.deployment.findMany({ where: { nodeId: node.id, state: { in: liveDeploymentStates } }, select: { id: true } }),
  ]);
  return {
    node,
    credentialSerials: credentials.map((c) => c.serial),
    jobIds: jobs.map((j) => j.id),
    deploymentIds: deployments.map((d) => d.id),
  };
}

/** Terminal: every credential revoked, unfinished work failed, streams closed; the node stays listed. */
export async function decommissionNode(deps: LifecycleDeps, nodeId: string, reason: string, correlationId: string, by: AuditActor) {
  const now = new Date(deps.clock.now());
  const why = reason || "decommissioned by operator";
  const outcome = await deps.prisma.$transaction(async (tx) => {
    const node = await findNodeOrThrow(tx, nodeId);
    refuseDecommissioned(node);
    const revokedSerials = await revokeActive(tx, node.id, "node decommissioned", now);
    const jobs = await tx.job.findMany({ where: { nodeId: node.id, state: { in: unfinishedJobStates } }, select: { id: true } });
    const failure = { code: "JOB_FAILURE_CODE_CANCELLED", message: `node decommissioned: ${why}`, retryable: false };
    const jobIds = jobs.map((j) => j.id);
    await tx.job.updateMany({
      where: { id: { in: jobIds } },
      data: { state: "failed", failure, finishedAt: now, leaseExpiresAt: null },
    });
    await tx.jobAttempt.updateMany({ where: { jobId: { in: jobIds }, endedAt: null }, data: { endedAt: now, outcome: "cancelled" } });
    const deployments = await tx.deployment.findMany({
      where: { nodeId: node.id, state: { in: liveDeploymentStates } },
      select: { id: true },
    });
    await tx.deployment.updateMany({
      where: { id: { in: deployments.map((d) => d.id) } },
      data: { state: "failed", failureReason: "node decommissioned" },
    });
    await tx.deploymentInstance.updateMany({
      where: { nodeId: node.id, phase: { in: liveDeploymentStates } },
      data: { phase: "failed", step: null, jobId: null, claimedAt: null, reason: "node decommissioned" },
    });
    // Unused recovery tokens for this node must not bring it back.
    await tx.enrollmentToken.updateMany({ where: { nodeId: node.id, usedAt: null, revokedAt: null }, data: { revokedAt: now } });
    const updated = await tx.node.update({ where: { id: node.id }, data: { decommissionedAt: now, renewalRequestedAt: null } });
    await recordAudit(tx, {
      ...by,
      action: "node.decommissioned",
      targetType: "node",
      targetId: node.id,
      correlationId,
      details: {
        reason: why,
        revokedSerials: revokedSerials.join(","),
        failedJobs: String(jobs.length),
        reclaimedDeployments: String(deployments.length),
      },
    });
    return { node: updated, revokedSerials, failedJobIds: jobs.map((j) => j.id), deploymentIds: deployments.map((d) => d.id) };
  });
  deps.sessions.closeNode(outcome.node.id, new ConnectError("node decommissioned", Code.PermissionDenied));
  return outcome;
}
