// Who is calling the operator API, once authenticated: a user (by provider token, console session
// or personal token) or a break-glass key. The admin interceptor puts it in the call's context;
// handlers read it to authorize and to name the actor of what they audit.
import { Code, ConnectError, createContextKey, type HandlerContext } from "@connectrpc/connect";
import type { Asked, AuditActor } from "../../audit/audit.js";
import { callOf } from "../../context.js";
import type { Grant } from "../roles.js";
import { lowerRole, type OperatorRole } from "../../operator-roles.js";

export type Principal = UserPrincipal | { kind: "break-glass"; role: OperatorRole };

export interface UserPrincipal {
  kind: "user";
  userId: string;
  email: string;
  name: string;
  role: OperatorRole;
  /** "oidc", "session" or "personal-token". */
  credential: "oidc" | "session" | "personal-token";
  /** The personal token's name, for that credential. */
  tokenName?: string | undefined;
}

export const breakGlassActor = "break-glass";

/** A user acting through a credential that holds `role`: never above the user's own role now. */
export function actingUser(
  user: { id: string; email: string; name: string; role: OperatorRole },
  role: OperatorRole,
  credential: UserPrincipal["credential"],
  tokenName?: string,
): UserPrincipal {
  return { kind: "user", userId: user.id, email: user.email, name: user.name, role: lowerRole(role, user.role), credential, tokenName };
}

export function actorOf(p: Principal): AuditActor {
  if (p.kind === "break-glass") return { actor: breakGlassActor };
  return { actor: `user:${p.userId}`, actorName: p.tokenName !== undefined ? `${p.email} token:${p.tokenName}` : p.email };
}

export const grantOf = (p: Principal): Grant => ({ role: p.role, user: p.kind === "user" });

/** How the caller authenticated, as GetOperatorRole says it. */
export function credentialOf(p: Principal): string {
  if (p.kind === "break-glass") return "break-glass";
  return p.credential === "personal-token" ? `personal-token:${p.tokenName ?? ""}` : p.credential;
}

const principalKey = createContextKey<Principal | undefined>(undefined, { description: "operator principal" });
export { principalKey };

export function principalIn(ctx: HandlerContext): Principal {
  const p = ctx.values.get(principalKey);
  if (p === undefined) throw new Error("operator principal missing: the call did not pass the admin interceptor");
  return p;
}

/** The audit actor of an admin call. */
export const actorIn = (ctx: HandlerContext): AuditActor => actorOf(principalIn(ctx));

/** The audit's view of an admin call: its actor and correlation id. */
export const askedIn = (ctx: HandlerContext): Asked => ({ ...actorIn(ctx), correlationId: callOf(ctx).correlationId });

/** The signed-in user of an ACCESS_SELF call (the role table already refused a break-glass key). */
export function userIn(ctx: HandlerContext): UserPrincipal {
  const p = principalIn(ctx);
  if (p.kind !== "user") throw new ConnectError("this call acts on a user's own identity: sign in as a user", Code.PermissionDenied);
  return p;
}
