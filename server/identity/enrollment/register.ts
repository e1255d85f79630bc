// Pre-registered nodes: an operator creates a node's record (name, labels) before the machine
// exists and gets a one-time token bound to it; the agent that enrolls with it becomes that node
// (./enroll.ts, the bound-token path). Record, token and audit event are one transaction.
import { randomUUID } from "node:crypto";
import { Code, ConnectError } from "@connectrpc/connect";
import { recordAudit, type AuditActor } from "../../audit/audit.js";
import { hashEnrollmentSecret, newEnrollmentSecret } from "./token.js";
import { joinCommandOf, tokenTtlMs, validateLabels, type TokenDeps } from "./tokens.js";

export interface RegisterNodeInput {
  name: string;
  labels: Record<string, string>;
  ttlMs: number | undefined;
  correlationId: string;
  by: AuditActor;
}

const maxNameLength = 128;

export async function registerNode(deps: Omit<TokenDeps, "sessions">, input: RegisterNodeInput) {
  const name = input.name.trim();
  if (name === "" || name.length > maxNameLength) {
    throw new ConnectError(`name must be 1 to ${maxNameLength} characters`, Code.InvalidArgument);
  }
  validateLabels(input.labels);
  const ttlMs = tokenTtlMs(deps, input.ttlMs);
  const secret = newEnrollmentSecret();
  const now = new Date(deps.clock.now());
  const nodeId = randomUUID();
  const token = await deps.prisma.$transaction(async (tx) => {
    await tx.node.create({ data: { id: nodeId, name, labels: input.labels, createdAt: now, livenessChangedAt: now } });
    const token = await tx.enrollmentToken.create({
      data: {
        id: randomUUID(),
        tokenHash: hashEnrollmentSecret(secret),
        nodeName: name,
        nodeId,
        labels: input.labels,
        createdAt: now,
        expiresAt: new Date(now.getTime() + ttlMs),
      },
    });
    await recordAudit(
      tx,
      {
        ...input.by,
        action: "node.registered",
        targetType: "node",
        targetId: nodeId,
        correlationId: input.correlationId,
        details: { enrollmentTokenId: token.id },
      },
      now,
    );
    return token;
  });
  // No --name: the node already has its name, and enrollment keeps it.
  return { nodeId, secret, token, joinCommand: joinCommandOf(deps.join, secret, "") };
}
