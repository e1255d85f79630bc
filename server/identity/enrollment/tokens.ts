// Operator side of enrollment tokens: create (the secret is returned once), list, revoke.
import { randomUUID } from "node:crypto";
import { Code, ConnectError } from "@connectrpc/connect";
import { recordAudit, type AuditActor } from "../../audit/audit.js";
import { newEnrollmentSecret, hashEnrollmentSecret } from "./token.js";
import { findNodeOrThrow } from "../node-record.js";
import type { PrismaClient } from "../../../gen/prisma/client.js";
import type { Clock } from "../../../common/clock.js";
import type { NodeSessions } from "../../node-sessions.js";

/** What the operator side of enrollment tokens works with. */
export interface TokenDeps {
  prisma: PrismaClient;
  clock: Clock;
  /** Lifetime of a token created without a ttl. */
  defaultTtlMs: number;
  /** A recovery token revokes the node's credential: its open stream ends too. */
  sessions: Pick<NodeSessions, "closeSerials">;
  /** What a join command names: the URL agents dial and the CA they pin. */
  join: { serverUrl: string; caFingerprint: string };
}

export interface CreateTokenInput {
  nodeName: string;
  nodeId: string;
  ttlMs: number | undefined;
  labels: Record<string, string>;
  correlationId: string;
  by: AuditActor;
}

const maxTtlMs = 7 * 24 * 3600 * 1000;

export function tokenTtlMs(deps: Pick<TokenDeps, "defaultTtlMs">, ttlMs: number | undefined): number {
  const ttl = ttlMs ?? deps.defaultTtlMs;
  if (!(ttl > 0) || ttl > maxTtlMs) throw new ConnectError("ttl must be positive and at most 7 days", Code.InvalidArgument);
  return ttl;
}

export async function createEnrollmentToken(deps: TokenDeps, input: CreateTokenInput) {
  const ttlMs = tokenTtlMs(deps, input.ttlMs);
  validateLabels(input.labels);
  if (input.nodeName.length > 128) throw new ConnectError("node_name is longer than 128 characters", Code.InvalidArgument);
  const secret = newEnrollmentSecret();
  const now = new Date(deps.clock.now());
  const result = await deps.prisma.$transaction(async (tx) => {
    let revokedSerials: string[] = [];
    let nodeId: string | null = null;
    if (input.nodeId !== "") {
      const node = await findNodeOrThrow(tx, input.nodeId);
      if (node.decommissionedAt !== null) {
        throw new ConnectError(`node ${node.id} is decommissioned: it cannot be re-enrolled`, Code.FailedPrecondition);
      }
      nodeId = node.id;
      // The recovery path for a lost or stolen credential: the old one stops working now.
      const active = await tx.nodeCredential.findMany({ where: { nodeId, revokedAt: null }, select: { serial: true } });
      revokedSerials = active.map((c) => c.serial);
      await tx.nodeCredential.updateMany({
        where: { nodeId, revokedAt: null },
        data: { revokedAt: now, revokedReason: "recovery enrollment token issued" },
      });
    }
    const token = await tx.enrollmentToken.create({
      data: {
        id: randomUUID(),
        tokenHash: hashEnrollmentSecret(secret),
        nodeName: input.nodeName || null,
        nodeId,
        labels: input.labels,
        createdAt: now,
        expiresAt: new Date(now.getTime() + ttlMs),
      },
    });
    await recordAudit(tx, {
      ...input.by,
      action: "enrollment_token.created",
      targetType: "enrollment_token",
      targetId: token.id,
      correlationId: input.correlationId,
      details: nodeId !== null ? { nodeId, revokedSerials: revokedSerials.join(",") } : {},
    });
    return { token, revokedSerials };
  });
  deps.sessions.closeSerials(result.revokedSerials, new ConnectError("credential revoked", Code.Unauthenticated));
  return { secret, token: result.token, joinCommand: joinCommandOf(deps.join, secret, input.nodeName) };
}

/** The command an operator runs on the new machine: server URL, token, the CA's fingerprint. */
export function joinCommandOf(join: TokenDeps["join"], secret: string, nodeName: string): string {
  return (
    `npm run agent -- enroll --server ${join.serverUrl} --token ${secret} --ca-fingerprint ${join.caFingerprint}` +
    (nodeName ? ` --name ${shellQuote(nodeName)}` : "")
  );
}

export async function listEnrollmentTokens(deps: Pick<TokenDeps, "prisma">, pageSize: number, offset: number) {
  return deps.prisma.enrollmentToken.findMany({
    orderBy: [{ createdAt: "desc" }, { id: "asc" }],
    take: pageSize + 1,
    skip: offset,
  });
}

export async function revokeEnrollmentToken(deps: Pick<TokenDeps, "prisma" | "clock">, id: string, correlationId: string, by: AuditActor) {
  if (!/^[0-9a-f-]{36}$/i.test(id)) throw new ConnectError("id must be a UUID", Code.InvalidArgument);
  return deps.prisma.$transaction(async (tx) => {
    const token = await tx.enrollmentToken.findUnique({ where: { id } });
    if (token === null) throw new ConnectError(`enrollment token ${id} not found`, Code.NotFound);
    if (token.usedAt !== null) throw new ConnectError("enrollment token already used", Code.FailedPrecondition);
    if (token.revokedAt !== null) return token;
    const updated = await tx.enrollmentToken.update({ where: { id }, data: { revokedAt: new Date(deps.clock.now()) } });
    await recordAudit(tx, {
      ...by,
      action: "enrollment_token.revoked",
      targetType: "enrollment_token",
      targetId: id,
      correlationId,
    });
    return updated;
  });
}

export function validateLabels(labels: Record<string, string>): void {
  const entries = Object.entries(labels);
  if (entries.length > 64) throw new ConnectError("at most 64 labels", Code.InvalidArgument);
  for (const [k, v] of entries) {
    if (!/^[A-Za-z0-9]([A-Za-z0-9._/-]{0,62}[A-Za-z0-9])?$/.test(k)) {
      throw new ConnectError(`label key "${k}" is not valid (letters, digits, ".", "_", "-", "/"; at most 64)`, Code.InvalidArgument);
    }
    if (v.length > 256) throw new ConnectError(`label "${k}" value is longer than 256 characters`, Code.InvalidArgument);
  }
}

function shellQuote(s: string): string {
  return /^[A-Za-z0-9._-]+$/.test(s) ? s : `'${s.replace(/'/g, `'\\''`)}'`;
}
