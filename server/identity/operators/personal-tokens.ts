// Personal access tokens: a user's credential for scripts and CI. Shown once, kept as a hash,
// listed with their last use, revocable, never above their creator's role, and dead with their user
// (every use reads the user's row too).
import { randomUUID } from "node:crypto";
import { Code, ConnectError } from "@connectrpc/connect";
import type { PersonalToken, PrismaClient, User } from "../../../gen/prisma/client.js";
import type { Clock } from "../../../common/clock.js";
import { recordAudit } from "../../audit/audit.js";
import { isOperatorRole, roleAtLeast, type OperatorRole } from "../../operator-roles.js";
import { actingUser, actorOf, type UserPrincipal } from "./principal.js";
import { hashSecret, newPersonalTokenSecret, personalTokenPattern, personalTokenPrefix } from "./secrets.js";
import { deactivated, roleOfUser } from "./users.js";

export const defaultTokenTtlMs = 30 * 86_400_000;
export const maxTokenTtlMs = 365 * 86_400_000;
/** Live tokens per user: enough for every script, few enough that a list is one page. */
export const maxLiveTokens = 100;
/** Last use is kept to the minute, so a busy script writes at most once a minute. */
const lastUseGrainMs = 60_000;

const article = (role: string) => (/^[aeiou]/.test(role) ? "an" : "a");

export interface TokensDeps {
  prisma: PrismaClient;
  clock: Clock;
}

export interface NewToken {
  name: string;
  ttlMs: number | undefined;
  role: OperatorRole | undefined;
}

export async function createPersonalToken(
  deps: TokensDeps,
  owner: UserPrincipal,
  input: NewToken,
  correlationId: string,
): Promise<{ secret: string; token: PersonalToken }> {
  // A leaked token must not outlive its revocation by minting others.
  if (owner.credential === "personal-token") {
    throw new ConnectError("a personal token cannot make another: sign in (forge login) to make one", Code.PermissionDenied);
  }
  const role = input.role ?? owner.role;
  if (!roleAtLeast(owner.role, role)) {
    throw new ConnectError(`role: ${article(owner.role)} ${owner.role} cannot make a token with the ${role} role`, Code.PermissionDenied);
  }
  const ttlMs = input.ttlMs ?? defaultTokenTtlMs;
  if (ttlMs <= 0 || ttlMs > maxTokenTtlMs) throw new ConnectError("ttl: between 1 second and 365 days", Code.InvalidArgument);
  const now = deps.clock.now();
  const secret = newPersonalTokenSecret();
  const token = await deps.prisma.$transaction(async (tx) => {
    const live = await tx.personalToken.findMany({
      where: { userId: owner.userId, revokedAt: null, expiresAt: { gt: new Date(now) } },
      select: { name: true },
    });
    if (live.some((t) => t.name === input.name)) {
      throw new ConnectError(`name: you already have a live token named "${input.name}"`, Code.AlreadyExists);
    }
    if (live.length >= maxLiveTokens) {
      throw new ConnectError(`you have ${maxLiveTokens} live tokens: revoke one first`, Code.ResourceExhausted);
    }
    const created = await tx.personalToken.create({
      data: {
        id: randomUUID(),
        userId: owner.userId,
        name: input.name,
        prefix: secret.slice(0, personalTokenPrefix.length + 8),
        secretHash: hashSecret(secret),
        role,
        createdAt: new Date(now),
        expiresAt: new Date(now + ttlMs),
      },
    });
    await recordAudit(
      tx,
      {
        ...actorOf(owner),
        action: "personal_token.created",
        targetType: "personal_token",
        targetId: created.id,
        correlationId,
        details: { name: input.name, role },
      },
      new Date(now),
    );
    return created;
  });
  return { secret, token };
}

export async function listPersonalTokens(deps: TokensDeps, userId: string, includeRevoked: boolean): Promise<PersonalToken[]> {
  return deps.prisma.personalToken.findMany({
    where: { userId, ...(includeRevoked ? {} : { revokedAt: null, expiresAt: { gt: new Date(deps.clock.now()) } }) },
    orderBy: [{ createdAt: "desc" }, { id: "asc" }],
    take: includeRevoked ? 1000 : maxLiveTokens,
  });
}

/** Only the owner's own token: another user's is not found, as a missing one is. */
export async function revokePersonalToken(
  deps: TokensDeps,
  owner: UserPrincipal,
  id: string,
  correlationId: string,
): Promise<PersonalToken> {
  const now = new Date(deps.clock.now());
  return deps.prisma.$transaction(async (tx) => {
    const found = await tx.personalToken.findUnique({ where: { id } });
    if (found === null || found.userId !== owner.userId) throw new ConnectError(`personal token ${id} not found`, Code.NotFound);
    if (found.revokedAt !== null) return found;
    const token = await tx.personalToken.update({ where: { id }, data: { revokedAt: now } });
    await recordAudit(
      tx,
      {
        ...actorOf(owner),
        action: "personal_token.revoked",
        targetType: "personal_token",
        targetId: id,
        correlationId,
        details: { name: found.name },
      },
      now,
    );
    return token;
  });
}

const refused = (why: string) => new ConnectError(`invalid personal token: ${why}`, Code.Unauthenticated);

/** The user a token acts for, with the role it acts with now (its own, capped by its user's current one). */
export async function personalTokenUser(deps: TokensDeps, secret: string): Promise<UserPrincipal> {
  if (!personalTokenPattern.test(secret)) throw refused("malformed");
  const found = await deps.prisma.personalToken.findUnique({ where: { secretHash: hashSecret(secret) }, include: { user: true } });
  if (found === null) throw refused("unknown");
  const now = deps.clock.now();
  if (found.revokedAt !== null) throw refused("revoked");
  if (found.expiresAt.getTime() <= now) throw refused("expired");
  const user: User = found.user;
  if (user.deactivatedAt !== null) throw deactivated();
  if (!isOperatorRole(found.role)) throw refused("no valid role");
  const minute = now - (now % lastUseGrainMs);
  if (found.lastUsedAt === null || found.lastUsedAt.getTime() < minute) {
    // Best effort: a lost write only makes the last use look older.
    await deps.prisma.personalToken
      .updateMany({
        where: { id: found.id, OR: [{ lastUsedAt: null }, { lastUsedAt: { lt: new Date(minute) } }] },
        data: { lastUsedAt: new Date(minute) },
      })
      .catch(() => undefined);
  }
  return actingUser({ ...user, role: roleOfUser(user) }, found.role, "personal-token", found.name);
}
