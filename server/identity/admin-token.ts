// The break-glass keys: the static operator keys of MODELFORGE_OPERATOR_API_KEY (the admin role)
// and MODELFORGE_OPERATOR_READONLY_KEY (the viewer role), for when single sign-on cannot be used.
// Fails closed: no configured key, or the keys turned off, means no call passes with one.
import { createHash, timingSafeEqual } from "node:crypto";
import { Code, ConnectError } from "@connectrpc/connect";
import type { OperatorKeys } from "./roles.js";
import type { OperatorRole } from "../operator-roles.js";

export const adminTokenHeader = "x-modelforge-admin-token";

/** Constant-time: both sides are hashed to equal-length digests first, so length leaks nothing. */
export function secretsEqual(given: string, expected: string): boolean {
  const a = createHash("sha256").update(given).digest();
  const b = createHash("sha256").update(expected).digest();
  return timingSafeEqual(a, b);
}

/** The role of a break-glass key; unauthenticated when it is none of the configured keys. `keys` undefined: turned off. */
export function breakGlassRole(given: string | null, keys: OperatorKeys | undefined): OperatorRole {
  if (keys === undefined) {
    throw new ConnectError(
      "break-glass keys are turned off on this server (MODELFORGE_BREAK_GLASS=off): sign in with forge login",
      Code.Unauthenticated,
    );
  }
  if (keys.admin === undefined && keys.readOnly === undefined) {
    throw new ConnectError("admin API disabled: the server has no MODELFORGE_OPERATOR_API_KEY configured", Code.Unauthenticated);
  }
  if (given === null || given === "") {
    // HTTP/2 drops a header whose value begins or ends with whitespace (RFC 9113), so a key pasted
    // with a space or tab arrives as no header at all; the server cannot tell the two apart.
    throw new ConnectError(
      `invalid admin token: the ${adminTokenHeader} header is missing (HTTP/2 drops a value with leading or trailing whitespace)`,
      Code.Unauthenticated,
    );
  }
  // Both comparisons always run, so the time taken does not tell which key was close.
  const admin = keys.admin !== undefined && secretsEqual(given, keys.admin);
  const readOnly = keys.readOnly !== undefined && secretsEqual(given, keys.readOnly);
  if (admin) return "admin";
  if (readOnly) return "viewer";
  throw new ConnectError("invalid admin token", Code.Unauthenticated);
}
