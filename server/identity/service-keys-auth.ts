// Who may call what: DeploymentService takes a service key and nothing else (a node certificate
// or the operator's admin token is refused there), and a service key is refused on every other
// service. Runs as a Connect interceptor after the edge; the handlers read the principal with
// `servicePrincipalOf`. Refusals are logged (and, for keys the server knows, audited) through a
// flood gate, since anyone can provoke them; never with the secret.
import { Code, ConnectError, createContextKey, type HandlerContext, type Interceptor } from "@connectrpc/connect";
import { DeploymentService } from "../../gen/proto/modelforge/deployment/v1/deployment_pb.js";
import { callerKey } from "../context.js";
import { adminTokenHeader } from "./admin-token.js";
import { FloodGate, FloodLogger, floodPolicy } from "../observability/flood-log.js";
import type { Logger } from "../observability/logger.js";
import type { Clock } from "../../common/clock.js";
import { codeName } from "../../common/codes.js";
import { bearerServiceKey, looksLikeServiceKey, ServiceKeyRefusal, type ServiceKeys, type ServicePrincipal } from "./service-keys.js";

export const serviceKeyHeader = "authorization";

const principalKey = createContextKey<ServicePrincipal | undefined>(undefined, { description: "service principal" });

/** The authenticated service key of a DeploymentService call. */
export function servicePrincipalOf(ctx: HandlerContext): ServicePrincipal {
  const p = ctx.values.get(principalKey);
  if (p === undefined) throw new ConnectError("service key required", Code.Unauthenticated);
  return p;
}

/** Pure: what a call to a service other than DeploymentService may not carry. */
export function refuseServiceKeyElsewhere(authorization: string | null): void {
  if (looksLikeServiceKey(authorization)) {
    throw new ConnectError("service keys are accepted only by DeploymentService", Code.PermissionDenied);
  }
}

/** Pure: the credentials DeploymentService refuses before it looks at a key. */
export function refuseForeignCredentials(call: { certificatePresented: boolean; adminToken: string | null }): void {
  if (call.certificatePresented) {
    throw new ConnectError("DeploymentService does not accept client certificates: call it with a service key only", Code.PermissionDenied);
  }
  if (call.adminToken !== null && call.adminToken !== "") {
    throw new ConnectError("DeploymentService does not accept the admin token: call it with a service key only", Code.PermissionDenied);
  }
}

export interface ServiceKeyAuthDeps {
  keys: ServiceKeys;
  log: Logger;
  clock: Clock;
}

export function serviceKeyInterceptor(deps: ServiceKeyAuthDeps): Interceptor {
  const refusals = new FloodLogger(deps.log, "service credential refused", floodPolicy, () => deps.clock.now());
  // Audit rows for refusals of known keys: the first few per window, as the log lines.
  const audits = new FloodGate(floodPolicy);
  return (next) => async (req) => {
    const authorization = req.header.get(serviceKeyHeader);
    const caller = req.contextValues.get(callerKey);
    const peer = caller?.peerAddress ?? "unknown";
    const refuse = (err: unknown): never => {
      // A database outage is no refusal: the call log answers it as unavailable.
      if (!(err instanceof ConnectError)) throw err;
      const ce = err;
      const path = `/${req.service.typeName}/${req.method.name}`;
      refusals.warn(peer, { correlationId: caller?.correlationId, path, code: codeName(ce.code), reason: ce.rawMessage });
      if (err instanceof ServiceKeyRefusal && audits.note(err.keyId, deps.clock.now())) {
        void deps.keys.auditRefusal(err.keyId, err.rawMessage, caller?.correlationId ?? "").catch(() => undefined);
      }
      throw ce;
    };
    if (req.service.typeName !== DeploymentService.typeName) {
      try {
        refuseServiceKeyElsewhere(authorization);
      } catch (err) {
        refuse(err);
      }
      return next(req);
    }
    try {
      refuseForeignCredentials({
        certificatePresented: caller?.certificate !== undefined || caller?.certificateError !== undefined,
        adminToken: req.header.get(adminTokenHeader),
      });
      const secret = bearerServiceKey(authorization);
      if (secret === undefined) {
        throw new ConnectError(`service key required: send "Authorization: Bearer mfsk_..."`, Code.Unauthenticated);
      }
      req.contextValues.set(principalKey, await deps.keys.authenticate(secret));
    } catch (err) {
      refuse(err);
    }
    return next(req);
  };
}
