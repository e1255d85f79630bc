// What the edge decides from a request's headers and TLS state alone, before a byte of its body is
// read: whether it fits its method's limit as declared, whether an admin or node call carries the
// credential it needs, and whether a break-glass key's role may call the method. The handlers check
// again in full (the admin interceptor, the node's credential in the database); this only keeps the
// unauthenticated and the unauthorized from making the server read.
import { Code, ConnectError } from "@connectrpc/connect";
import { AdminService } from "../../gen/proto/modelforge/admin/v1/admin_pb.js";
import { AgentService } from "../../gen/proto/modelforge/agent/v1/agent_pb.js";
import { DeploymentService } from "../../gen/proto/modelforge/deployment/v1/deployment_pb.js";
import { refuseForeignCredentials, refuseServiceKeyElsewhere } from "../identity/service-keys-auth.js";
import { bearerServiceKey } from "../identity/service-keys.js";
import { breakGlassRole } from "../identity/admin-token.js";
import { authorizePath, type OperatorKeys } from "../identity/roles.js";
import { presentedIdentity } from "../identity/node-auth.js";
import type { Caller } from "../context.js";
import { requestLimitOf, type RequestLimit } from "./limits.js";

export interface EdgeRequest {
  /** The request path without its query string. */
  path: string;
  contentType: string;
  /** The declared content-length, if any. */
  contentLength: number | undefined;
  /** The x-modelforge-admin-token header, if any. */
  adminToken: string | undefined;
  /** The authorization header (a service key, a personal token or an ID token), if any. */
  authorization?: string | undefined;
  /** Whether the console's session cookie came (checked by the admin interceptor). */
  cookie?: boolean;
  /** The TLS client certificate, read only for calls that need one. */
  peer: () => Pick<Caller, "certificate" | "certificateError">;
}

export type Admission = { admitted: true; limit: RequestLimit } | { admitted: false; refusal: ConnectError };

const adminPrefix = `/${AdminService.typeName}/`;
const agentPrefix = `/${AgentService.typeName}/`;
const deploymentPrefix = `/${DeploymentService.typeName}/`;
/** The agent calls a node makes before it has a certificate. */
const anonymousAgentPaths: ReadonlySet<string> = new Set(
  [AgentService.method.getServerInfo, AgentService.method.enroll].map((m) => `${agentPrefix}${m.name}`),
);

export function tooLarge(path: string, limit: number, declared?: number): ConnectError {
  const size = declared !== undefined ? `of ${declared} bytes ` : "";
  return new ConnectError(`request body ${size}is over the limit of ${limit} bytes for ${path}`, Code.ResourceExhausted);
}

/** `operatorKeys` undefined: the break-glass keys are off. */
export function admit(req: EdgeRequest, operatorKeys: OperatorKeys | undefined): Admission {
  const limit = requestLimitOf(req.path, req.contentType);
  try {
    // A stream's content-length, should it declare one, is its total: only its messages are bounded.
    if (!limit.perMessage && req.contentLength !== undefined && req.contentLength > limit.bytes) {
      throw tooLarge(req.path, limit.bytes, req.contentLength);
    }
    if (req.path.startsWith(deploymentPrefix)) {
      // Service keys only; the key itself is checked against the database by the interceptor.
      const peer = req.peer();
      refuseForeignCredentials({
        certificatePresented: peer.certificate !== undefined || peer.certificateError !== undefined,
        adminToken: req.adminToken ?? null,
      });
      if (bearerServiceKey(req.authorization) === undefined) {
        throw new ConnectError(`service key required: send "Authorization: Bearer mfsk_..."`, Code.Unauthenticated);
      }
      return { admitted: true, limit };
    }
    refuseServiceKeyElsewhere(req.authorization ?? null);
    if (req.path.startsWith(adminPrefix)) admitOperator(req, operatorKeys);
    else if (req.path.startsWith(agentPrefix) && !anonymousAgentPaths.has(req.path)) presentedIdentity(req.peer());
  } catch (err) {
    if (err instanceof ConnectError) return { admitted: false, refusal: err };
    throw err;
  }
  return { admitted: true, limit };
}

/**
 * A break-glass key is checked, and its role authorized, here in full. A user's credential (a
 * bearer token, the console's cookie) needs the database: it is only required to be present here,
 * and the admin interceptor checks it before the handler runs.
 */
function admitOperator(req: EdgeRequest, operatorKeys: OperatorKeys | undefined): void {
  if (req.authorization !== undefined || (req.cookie === true && req.adminToken === undefined)) return;
  authorizePath({ role: breakGlassRole(req.adminToken ?? null, operatorKeys), user: false }, req.path);
}
