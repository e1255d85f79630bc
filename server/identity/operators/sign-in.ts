// What a verified ID token says about its user, as a sign-in: who (issuer and subject), their
// email and name, bounded and cleaned, and the role their groups map to. Pure.
import { Code, ConnectError } from "@connectrpc/connect";
import type { IdentityClaims } from "./oidc.js";
import { groupsIn, roleForGroups, type SsoConfig } from "../../sso-config.js";
import type { SignIn } from "./users.js";

const maxSubjectBytes = 255;
const maxEmailLength = 320;
const maxNameLength = 256;

/** Control characters removed, length bounded: a provider's profile is shown and logged as text. */
function clean(value: unknown, max: number): string {
  if (typeof value !== "string") return "";
  return value
    .replace(/[\u0000-\u001f\u007f-\u009f]/g, "")
    .trim()
    .slice(0, max);
}

export function signedInAs(config: Pick<SsoConfig, "issuer" | "groupsClaim" | "roleMap" | "defaultRole">, claims: IdentityClaims): SignIn {
  if (typeof claims.sub !== "string" || claims.sub === "" || Buffer.byteLength(claims.sub) > maxSubjectBytes) {
    throw new ConnectError("invalid identity token: sub missing or too long", Code.Unauthenticated);
  }
  const role = roleForGroups(groupsIn(claims, config.groupsClaim), config.roleMap, config.defaultRole);
  if (role === undefined) {
    throw new ConnectError(
      `no role: none of your groups at the identity provider (claim "${config.groupsClaim}") maps to a ModelForge role`,
      Code.PermissionDenied,
    );
  }
  const email = clean(claims.email, maxEmailLength);
  const name = clean(claims.name, maxNameLength) || clean(claims.preferred_username, maxNameLength) || email || claims.sub;
  return {
    issuer: config.issuer,
    subject: claims.sub,
    email: email || clean(claims.preferred_username, maxEmailLength) || claims.sub,
    name,
    role,
  };
}
