// Who is calling the operator API, from the request's headers: a bearer token (a provider's ID
// token, or a personal access token), a break-glass key, or the console's session cookie. One
// credential per call; anything unrecognised or refused is unauthenticated with the reason, and no
// credential's value ever appears in a message.
import { Code, ConnectError } from "@connectrpc/connect";
import { parseCookie } from "cookie";
import type { PrismaClient } from "../../../gen/prisma/client.js";
import type { Clock } from "../../../common/clock.js";
import { adminTokenHeader, breakGlassRole } from "../admin-token.js";
import type { OperatorKeys } from "../roles.js";
import type { OperatorRole } from "../../operator-roles.js";
import { actingUser, type Principal, type UserPrincipal } from "./principal.js";
import { hashSecret, personalTokenPrefix } from "./secrets.js";
import { personalTokenUser } from "./personal-tokens.js";
import { consoleSessionUser } from "./console-sessions.js";
import { deactivated, roleOfUser, signIn } from "./users.js";
import type { OidcProvider } from "./oidc.js";
import { signedInAs } from "./sign-in.js";

/** `__Host-`: the browser keeps it only if Secure, for this host, on path /. */
export const sessionCookie = "__Host-modelforge-session";

export interface PresentedCredentials {
  adminToken: string | null;
  authorization: string | null;
  cookie: string | null;
  /** For the cookie only: what a cross-site form cannot send (see `cookieMayAuthenticate`). */
  contentType: string | null;
  origin: string | null;
  host: string | null;
}

export interface OperatorAuthDeps {
  prisma: PrismaClient;
  clock: Clock;
  /** Undefined: the break-glass keys are off (MODELFORGE_BREAK_GLASS=off). */
  breakGlass: OperatorKeys | undefined;
  /** Undefined: no single sign-on configured. */
  oidc: OidcProvider | undefined;
}

/** The bearer token of an Authorization header; undefined when the header is absent. */
export function bearerOf(header: string | null): string | undefined {
  if (header === null) return undefined;
  const m = /^Bearer +(\S+)$/i.exec(header.trim());
  if (m === null) throw new ConnectError('authorization: expected "Bearer <token>"', Code.Unauthenticated);
  return m[1]!;
}

/**
 * A session cookie authenticates only calls a cross-site page cannot forge without the browser
 * asking us first (CORS, which this server never grants): a non-form content type, and an Origin,
 * when the browser sends one, of this very host.
 */
export function cookieMayAuthenticate(c: Pick<PresentedCredentials, "contentType" | "origin" | "host">): boolean {
  const type = (c.contentType ?? "").split(";", 1)[0]!.trim().toLowerCase();
  if (!type.startsWith("application/") || type === "application/x-www-form-urlencoded") return false;
  if (c.origin === null) return true;
  try {
    return c.host !== null && new URL(c.origin).host === c.host;
  } catch {
    return false;
  }
}

/** The console session's secret in a Cookie header, if any. */
export function sessionSecretOf(cookieHeader: string | null): string | undefined {
  if (cookieHeader === null) return undefined;
  return parseCookie(cookieHeader)[sessionCookie];
}

export class OperatorAuth {
  /** ID tokens (by hash) already verified and signed in: the user, until the token expires (a bounded map). */
  private readonly seenTokens = new Map<string, { userId: string; role: OperatorRole; expiresAt: number }>();
  private static readonly seenTokensMax = 10_000;

  constructor(private readonly deps: OperatorAuthDeps) {}

  async authenticate(c: PresentedCredentials, correlationId: string): Promise<Principal> {
    const bearer = bearerOf(c.authorization);
    if (bearer !== undefined && c.adminToken !== null) {
      throw new ConnectError("send one operator credential: an Authorization header or an admin token, not both", Code.Unauthenticated);
    }
    if (bearer !== undefined) {
      if (bearer.startsWith(personalTokenPrefix)) return personalTokenUser(this.deps, bearer);
      return this.idTokenUser(bearer, correlationId);
    }
    if (c.adminToken !== null) return { kind: "break-glass", role: breakGlassRole(c.adminToken, this.deps.breakGlass) };
    const session = sessionSecretOf(c.cookie);
    if (session !== undefined) {
      if (!cookieMayAuthenticate(c)) throw new ConnectError("console session refused: a cross-site request", Code.Unauthenticated);
      return consoleSessionUser(this.deps, session);
    }
    throw new ConnectError(this.missingMessage(), Code.Unauthenticated);
  }

  private missingMessage(): string {
    const ways = [];
    if (this.deps.oidc !== undefined) ways.push("sign in (forge login, or the console)");
    ways.push('a personal token ("Authorization: Bearer mfpt_...")');
    if (this.deps.breakGlass !== undefined) ways.push(`a break-glass key (${adminTokenHeader})`);
    return `operator credential required: ${ways.join(", or ")}`;
  }

  private async idTokenUser(token: string, correlationId: string): Promise<UserPrincipal> {
    const oidc = this.deps.oidc;
    if (oidc === undefined)
      throw new ConnectError("unrecognised bearer token: this server has no single sign-on configured", Code.Unauthenticated);
    if (token.split(".").length !== 3)
      throw new ConnectError("unrecognised bearer token: neither a personal token nor an ID token", Code.Unauthenticated);
    const now = this.deps.clock.now();
    const key = hashSecret(token);
    let seen = this.seenTokens.get(key);
    if (seen !== undefined && seen.expiresAt <= now) {
      this.seenTokens.delete(key);
      seen = undefined;
    }
    if (seen === undefined) {
      const claims = await oidc.verifyIdToken(token, [oidc.config.cliClientId]);
      // The role from the token's groups: a group removed at the provider shows at the next refresh.
      const user = await signIn(this.deps, signedInAs(oidc.config, claims), correlationId);
      seen = { userId: user.id, role: roleOfUser(user), expiresAt: (claims.exp ?? 0) * 1000 };
      if (this.seenTokens.size >= OperatorAuth.seenTokensMax) this.seenTokens.delete(this.seenTokens.keys().next().value!);
      this.seenTokens.set(key, seen);
    }
    // Every call reads the user, so a deactivation is refused at once on every replica.
    const user = await this.deps.prisma.user.findUnique({ where: { id: seen.userId } });
    if (user === null || user.deactivatedAt !== null) throw deactivated();
    return actingUser({ ...user, role: roleOfUser(user) }, seen.role, "oidc");
  }
}
