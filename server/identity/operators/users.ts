// Users: made at their first sign-in from the provider's (issuer, subject), their email, name and
// role refreshed at each one. Deactivation is an admin's, takes effect at once (every credential
// is checked against the user's row on every call), and is told to every replica on the cluster
// bus so their open streams end too.
import { randomUUID } from "node:crypto";
import { Code, ConnectError } from "@connectrpc/connect";
import type { PrismaClient, User } from "../../../gen/prisma/client.js";
import type { Clock } from "../../../common/clock.js";
import { recordAudit, type AuditActor } from "../../audit/audit.js";
import { isOperatorRole, type OperatorRole } from "../../operator-roles.js";

export interface SignIn {
  issuer: string;
  subject: string;
  email: string;
  name: string;
  role: OperatorRole;
}

export interface UsersDeps {
  prisma: PrismaClient;
  clock: Clock;
}

/** The user's row after this sign-in; refused when an admin deactivated them. */
export async function signIn(deps: UsersDeps, who: SignIn, correlationId: string): Promise<User> {
  const now = new Date(deps.clock.now());
  return deps.prisma.$transaction(async (tx) => {
    const before = await tx.user.findUnique({ where: { issuer_subject: { issuer: who.issuer, subject: who.subject } } });
    if (before?.deactivatedAt) throw deactivated();
    const user = await tx.user.upsert({
      where: { issuer_subject: { issuer: who.issuer, subject: who.subject } },
      create: { id: randomUUID(), ...who, createdAt: now, lastSignInAt: now },
      update: { email: who.email, name: who.name, role: who.role, lastSignInAt: now },
    });
    const actor = { actor: `user:${user.id}`, actorName: user.email };
    if (before === null) await audit(tx, actor, "user.created", user.id, correlationId, { role: who.role, issuer: who.issuer }, now);
    else if (before.role !== who.role)
      await audit(tx, actor, "user.role_changed", user.id, correlationId, { from: before.role, to: who.role }, now);
    return user;
  });
}

export const deactivated = () => new ConnectError("user deactivated: ask an admin", Code.Unauthenticated);

/** The user's role as stored, checked. */
export function roleOfUser(user: Pick<User, "role">): OperatorRole {
  if (!isOperatorRole(user.role)) throw new ConnectError("user has no valid role: sign in again", Code.Unauthenticated);
  return user.role;
}

export async function listUsers(deps: UsersDeps, take: number, skip: number): Promise<User[]> {
  return deps.prisma.user.findMany({ orderBy: [{ createdAt: "desc" }, { id: "asc" }], take, skip });
}

/** Sets or clears deactivation; a deactivation also ends the user's console sessions and revokes their personal tokens, for good. */
export async function setUserActive(deps: UsersDeps, id: string, active: boolean, by: AuditActor, correlationId: string): Promise<User> {
  const now = new Date(deps.clock.now());
  if (!active && by.actor === `user:${id}`) {
    throw new ConnectError("cannot deactivate yourself: another admin must", Code.FailedPrecondition);
  }
  return deps.prisma.$transaction(async (tx) => {
    const found = await tx.user.findUnique({ where: { id } });
    if (found === null) throw new ConnectError(`user ${id} not found`, Code.NotFound);
    if ((found.deactivatedAt === null) === active) return found;
    const user = await tx.user.update({ where: { id }, data: { deactivatedAt: active ? null : now } });
    if (!active) {
      await tx.consoleSession.updateMany({ where: { userId: id, endedAt: null }, data: { endedAt: now } });
      await tx.personalToken.updateMany({ where: { userId: id, revokedAt: null }, data: { revokedAt: now } });
    }
    await audit(tx, by, active ? "user.reactivated" : "user.deactivated", id, correlationId, { email: user.email }, now);
    return user;
  });
}

type Tx = Parameters<Parameters<PrismaClient["$transaction"]>[0]>[0];

function audit(tx: Tx, by: AuditActor, action: string, id: string, correlationId: string, details: Record<string, string>, at: Date) {
  return recordAudit(tx, { ...by, action, targetType: "user", targetId: id, correlationId, details }, at);
}
