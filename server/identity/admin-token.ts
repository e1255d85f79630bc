// The admin API's guard. Fails closed: no configured key means every admin call is refused.
import { createHash, timingSafeEqual } from "node:crypto";
import { Code, ConnectError, type Interceptor } from "@connectrpc/connect";
import { AdminService } from "../../gen/proto/modelforge/admin/v1/admin_pb.js";

export const adminTokenHeader = "x-modelforge-admin-token";

/** Constant-time: both sides are hashed to equal-length digests first, so length leaks nothing. */
export function secretsEqual(given: string, expected: string): boolean {
  const a = createHash("sha256").update(given).digest();
  const b = createHash("sha256").update(expected).digest();
  return timingSafeEqual(a, b);
}

export function checkAdminToken(given: string | null, configuredKey: string | undefined): void {
  if (configuredKey === undefined) {
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
  if (!secretsEqual(given, configuredKey)) {
    throw new ConnectError("invalid admin token", Code.Unauthenticated);
  }
}

export function adminAuthInterceptor(configuredKey: string | undefined): Interceptor {
  return (next) => async (req) => {
    if (req.service.typeName === AdminService.typeName) {
      checkAdminToken(req.header.get(adminTokenHeader), configuredKey);
    }
    return next(req);
  };
}
