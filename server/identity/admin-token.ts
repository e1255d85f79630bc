// The operator API's guard. Fails closed: no configured key means every admin call is refused. A
// key names a role (./roles.ts); each method's contract option says which roles may call it.
import { createHash, timingSafeEqual } from "node:crypto";
import { Code, ConnectError, createContextKey, type HandlerContext, type Interceptor } from "@connectrpc/connect";
import { AdminService } from "../../gen/proto/modelforge/admin/v1/admin_pb.js";
import { authorize, type OperatorKeys, type OperatorRole } from "./roles.js";

export const adminTokenHeader = "x-modelforge-admin-token";

/** Constant-time: both sides are hashed to equal-length digests first, so length leaks nothing. */
export function secretsEqual(given: string, expected: string): boolean {
  const a = createHash("sha256").update(given).digest();
  const b = createHash("sha256").update(expected).digest();
  return timingSafeEqual(a, b);
}

/** The role of the key a caller presented; unauthenticated when it is no configured key. */
export function operatorRoleOf(given: string | null, keys: OperatorKeys): OperatorRole {
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
  if (readOnly) return "read-only";
  throw new ConnectError("invalid admin token", Code.Unauthenticated);
}

const roleKey = createContextKey<OperatorRole | undefined>(undefined, { description: "operator role" });

/** The role the interceptor authenticated for this admin call. */
export function operatorRoleIn(ctx: HandlerContext): OperatorRole {
  const role = ctx.values.get(roleKey);
  if (role === undefined) throw new Error("operator role missing: the call did not pass the admin interceptor");
  return role;
}

export function adminAuthInterceptor(keys: OperatorKeys): Interceptor {
  return (next) => async (req) => {
    if (req.service.typeName === AdminService.typeName) {
      const role = operatorRoleOf(req.header.get(adminTokenHeader), keys);
      authorize(role, req.method);
      req.contextValues.set(roleKey, role);
    }
    return next(req);
  };
}
