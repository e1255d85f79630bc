// The operator API's guard: every AdminService call is authenticated (./authenticate.ts), then
// authorized by the method's access in the contract (../roles.ts), and the principal is put in
// the call's context for handlers and their audit. A user's stream is held in ./live-calls.ts for
// as long as it is open, so their deactivation can end it.
import type { Interceptor, StreamResponse } from "@connectrpc/connect";
import { AdminService } from "../../../gen/proto/modelforge/admin/v1/admin_pb.js";
import { callerKey } from "../../context.js";
import { adminTokenHeader } from "../admin-token.js";
import { authorize } from "../roles.js";
import type { OperatorAuth } from "./authenticate.js";
import type { LiveOperatorCalls } from "./live-calls.js";
import { grantOf, principalKey } from "./principal.js";

export function adminAuthInterceptor(auth: Pick<OperatorAuth, "authenticate">, live: LiveOperatorCalls): Interceptor {
  return (next) => async (req) => {
    if (req.service.typeName !== AdminService.typeName) return next(req);
    const caller = req.contextValues.get(callerKey);
    const principal = await auth.authenticate(
      {
        adminToken: req.header.get(adminTokenHeader),
        authorization: req.header.get("authorization"),
        cookie: req.header.get("cookie"),
        contentType: req.header.get("content-type"),
        origin: req.header.get("origin"),
        host: caller?.host ?? null,
      },
      caller?.correlationId ?? "",
    );
    authorize(grantOf(principal), req.method);
    req.contextValues.set(principalKey, principal);
    if (principal.kind !== "user" || req.method.methodKind !== "server_streaming" || caller?.abandon === undefined) return next(req);
    const release = live.hold(principal.userId, caller.abandon);
    let res: Awaited<ReturnType<typeof next>>;
    try {
      res = await next(req);
    } catch (err) {
      release();
      throw err;
    }
    const stream = res as StreamResponse;
    return { ...stream, message: releasedAtEnd(stream.message, release) } as typeof res;
  };
}

async function* releasedAtEnd<T>(messages: AsyncIterable<T>, release: () => void): AsyncIterable<T> {
  try {
    yield* messages;
  } finally {
    release();
  }
}
