// The web console's sessions: made at a sign-in, held by the browser as an HttpOnly cookie, kept
// here as a hash, bounded in lifetime, ended by sign-out or by the user's deactivation.
import { randomUUID } from "node:crypto";
import { Code, ConnectError } from "@connectrpc/connect";
import type { PrismaClient } from "../../../gen/prisma/client.js";
import type { Clock } from "../../../common/clock.js";
import { isOperatorRole, type OperatorRole } from "../../operator-roles.js";
import { actingUser, type UserPrincipal } from "./principal.js";
import { hashSecret, newSessionSecret, sessionSecretPattern } from "./secrets.js";
import { deactivated, roleOfUser } from "./users.js";

export interface SessionsDeps {
  prisma: PrismaClient;
  clock: Clock;
}

export async function startConsoleSession(deps: SessionsDeps, userId: string, role: OperatorRole, ttlMs: number): Promise<string> {
  const secret = newSessionSecret();
  const now = deps.clock.now();
  await deps.prisma.consoleSession.create({
    data: { id: randomUUID(), userId, secretHash: hashSecret(secret), role, createdAt: new Date(now), expiresAt: new Date(now + ttlMs) },
  });
  return secret;
}

const ended = (why: string) => new ConnectError(`console session ${why}: sign in again`, Code.Unauthenticated);

export async function consoleSessionUser(deps: SessionsDeps, secret: string): Promise<UserPrincipal> {
  if (!sessionSecretPattern.test(secret)) throw ended("malformed");
  const found = await deps.prisma.consoleSession.findUnique({ where: { secretHash: hashSecret(secret) }, include: { user: true } });
  if (found === null) throw ended("unknown");
  if (found.user.deactivatedAt !== null) throw deactivated();
  if (found.endedAt !== null) throw ended("ended");
  if (found.expiresAt.getTime() <= deps.clock.now()) throw ended("expired");
  if (!isOperatorRole(found.role)) throw ended("has no valid role");
  return actingUser({ ...found.user, role: roleOfUser(found.user) }, found.role, "session");
}

/** Sign-out: the session ends for good. Unknown or malformed secrets end nothing. */
export async function endConsoleSession(deps: SessionsDeps, secret: string): Promise<void> {
  if (!sessionSecretPattern.test(secret)) return;
  await deps.prisma.consoleSession.updateMany({
    where: { secretHash: hashSecret(secret), endedAt: null },
    data: { endedAt: new Date(deps.clock.now()) },
  });
}
