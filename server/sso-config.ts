// Single sign-on settings, read from the environment by ../../config.ts, and the pure rule that
// turns a user's groups at the provider into a role. Nothing here touches the network.
import { isLoopbackUrl } from "../common/loopback.js";
import { isOperatorRole, roleAtLeast, type OperatorRole } from "./operator-roles.js";

export interface SsoConfig {
  /** The provider's issuer URL, exactly as its tokens' `iss` says it. */
  issuer: string;
  /** The web console's client (authorization code with PKCE). */
  clientId: string;
  /** The console client's secret; undefined for a public client. */
  clientSecret: string | undefined;
  /** The client `forge login` uses (a public client: device grant, or loopback redirect); ID tokens must be for it. */
  cliClientId: string;
  /** The scopes asked at sign-in. */
  scopes: string[];
  /** Where in the ID token the groups are: a claim name, or a dotted path ("realm_access.roles"). */
  groupsClaim: string;
  /** Group to role, in order; a user gets the highest role any of their groups maps to. */
  roleMap: GroupRole[];
  /** The role of a user none of whose groups is mapped; undefined: such a user cannot sign in. */
  defaultRole: OperatorRole | undefined;
}

export interface GroupRole {
  group: string;
  role: OperatorRole;
}

type Env = Record<string, string | undefined>;

export class SsoConfigError extends Error {}

/** Undefined when MODELFORGE_OIDC_ISSUER is unset: no single sign-on. */
export function parseSsoConfig(env: Env): SsoConfig | undefined {
  const issuer = env.MODELFORGE_OIDC_ISSUER?.trim();
  if (!issuer) return undefined;
  checkIssuer(issuer);
  const clientId = env.MODELFORGE_OIDC_CLIENT_ID?.trim();
  if (!clientId) throw new SsoConfigError("MODELFORGE_OIDC_CLIENT_ID: required with MODELFORGE_OIDC_ISSUER");
  const roleMap = parseRoleMap(env.MODELFORGE_OIDC_ROLES ?? "");
  const defaultRoleText = env.MODELFORGE_OIDC_DEFAULT_ROLE?.trim();
  if (defaultRoleText && !isOperatorRole(defaultRoleText)) {
    throw new SsoConfigError(`MODELFORGE_OIDC_DEFAULT_ROLE: expected viewer, operator or admin, got "${defaultRoleText}"`);
  }
  const defaultRole = defaultRoleText ? (defaultRoleText as OperatorRole) : undefined;
  if (roleMap.length === 0 && defaultRole === undefined) {
    throw new SsoConfigError(
      "MODELFORGE_OIDC_ROLES: map at least one group to a role (e.g. mf-admins=admin), or set MODELFORGE_OIDC_DEFAULT_ROLE",
    );
  }
  const scopes = (env.MODELFORGE_OIDC_SCOPES?.trim() || "openid profile email").split(/[\s,]+/).filter(Boolean);
  if (!scopes.includes("openid")) scopes.unshift("openid");
  return {
    issuer,
    clientId,
    clientSecret: env.MODELFORGE_OIDC_CLIENT_SECRET?.trim() || undefined,
    cliClientId: env.MODELFORGE_OIDC_CLI_CLIENT_ID?.trim() || clientId,
    scopes,
    groupsClaim: env.MODELFORGE_OIDC_GROUPS_CLAIM?.trim() || "groups",
    roleMap,
    defaultRole,
  };
}

/** https, or http on a loopback host only (a provider on the same machine, as in tests). */
function checkIssuer(issuer: string): void {
  let url: URL;
  try {
    url = new URL(issuer);
  } catch {
    throw new SsoConfigError(`MODELFORGE_OIDC_ISSUER: not a URL: "${issuer}"`);
  }
  if (url.protocol !== "https:" && !(url.protocol === "http:" && isLoopbackUrl(url))) {
    throw new SsoConfigError("MODELFORGE_OIDC_ISSUER: use https (http only on a loopback address)");
  }
}

/** "mf-admins=admin,mf-ops=operator": group names may hold anything but "=" and ",". */
export function parseRoleMap(text: string): GroupRole[] {
  const out: GroupRole[] = [];
  for (const raw of text.split(",")) {
    const item = raw.trim();
    if (item === "") continue;
    const at = item.lastIndexOf("=");
    const group = item.slice(0, at).trim();
    const role = item.slice(at + 1).trim();
    if (at <= 0 || group === "") throw new SsoConfigError(`MODELFORGE_OIDC_ROLES: expected group=role, got "${item}"`);
    if (!isOperatorRole(role))
      throw new SsoConfigError(`MODELFORGE_OIDC_ROLES: "${group}" maps to "${role}": expected viewer, operator or admin`);
    out.push({ group, role });
  }
  return out;
}

/** The groups in a token's claims at the configured place: a list of strings, or one string. */
export function groupsIn(claims: Record<string, unknown>, claim: string): string[] {
  let value: unknown = claims[claim];
  if (value === undefined && claim.includes(".")) {
    value = claim
      .split(".")
      .reduce<unknown>((at, key) => (at !== null && typeof at === "object" ? (at as Record<string, unknown>)[key] : undefined), claims);
  }
  if (typeof value === "string") return [value];
  if (Array.isArray(value)) return value.filter((g): g is string => typeof g === "string");
  return [];
}

/** The highest role any of the groups maps to, else the default; undefined: no role at all. */
export function roleForGroups(
  groups: readonly string[],
  map: readonly GroupRole[],
  defaultRole: OperatorRole | undefined,
): OperatorRole | undefined {
  let best: OperatorRole | undefined;
  const held = new Set(groups);
  for (const { group, role } of map) if (held.has(group) && (best === undefined || roleAtLeast(role, best))) best = role;
  return best ?? defaultRole;
}
