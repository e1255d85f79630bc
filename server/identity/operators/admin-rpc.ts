// The operator RPCs of modelforge.admin.v1.AdminService: who the caller is, users (an admin's),
// and the caller's own personal access tokens.
import { create } from "@bufbuild/protobuf";
import type { ServiceImpl } from "@connectrpc/connect";
import {
  type AdminService,
  CreatePersonalTokenResponseSchema,
  DeactivateUserResponseSchema,
  GetOperatorRoleResponseSchema,
  ListPersonalTokensResponseSchema,
  ListUsersResponseSchema,
  ReactivateUserResponseSchema,
  RevokePersonalTokenResponseSchema,
  UserSchema,
} from "../../../gen/proto/modelforge/admin/v1/admin_pb.js";
import type { PrismaClient } from "../../../gen/prisma/client.js";
import type { Clock } from "../../../common/clock.js";
import type { ClusterBus } from "../../cluster/bus.js";
import { callOf } from "../../context.js";
import { decodeOffset, encodePageToken, pageSizeOf, splitPage } from "../../rpc/paging.js";
import { positiveDurationMs } from "../../rpc/time.js";
import { roleFromProto, roleToProto, tokenToProto, userToProto } from "./codec.js";
import type { LiveOperatorCalls } from "./live-calls.js";
import { createPersonalToken, listPersonalTokens, revokePersonalToken } from "./personal-tokens.js";
import { actorIn, credentialOf, principalIn, userIn } from "./principal.js";
import { listUsers, setUserActive } from "./users.js";

type OperatorRpcs = Pick<
  ServiceImpl<typeof AdminService>,
  | "getOperatorRole"
  | "listUsers"
  | "deactivateUser"
  | "reactivateUser"
  | "createPersonalToken"
  | "listPersonalTokens"
  | "revokePersonalToken"
>;

export interface OperatorRpcDeps {
  prisma: PrismaClient;
  clock: Clock;
  bus: Pick<ClusterBus, "publish">;
  live: Pick<LiveOperatorCalls, "endCallsOf">;
}

export function adminOperators(deps: OperatorRpcDeps): OperatorRpcs {
  return {
    async getOperatorRole(_req, ctx) {
      const p = principalIn(ctx);
      return create(GetOperatorRoleResponseSchema, {
        role: roleToProto(p.role),
        credential: credentialOf(p),
        ...(p.kind === "user"
          ? { user: create(UserSchema, { id: p.userId, email: p.email, name: p.name, role: roleToProto(p.role) }) }
          : {}),
      });
    },
    async listUsers(req) {
      const size = pageSizeOf(req.pageSize);
      const offset = decodeOffset(req.pageToken);
      const { page, more } = splitPage(await listUsers(deps, size + 1, offset), size);
      return create(ListUsersResponseSchema, {
        users: page.map(userToProto),
        nextPageToken: more ? encodePageToken(String(offset + size)) : "",
      });
    },
    async deactivateUser(req, ctx) {
      const user = await setUserActive(deps, req.id, false, actorIn(ctx), callOf(ctx).correlationId);
      // Its streams here end now; every other replica's when the bus tells it.
      deps.live.endCallsOf(user.id);
      deps.bus.publish({ kind: "user-deactivated", userId: user.id });
      return create(DeactivateUserResponseSchema, { user: userToProto(user) });
    },
    async reactivateUser(req, ctx) {
      const user = await setUserActive(deps, req.id, true, actorIn(ctx), callOf(ctx).correlationId);
      return create(ReactivateUserResponseSchema, { user: userToProto(user) });
    },
    async createPersonalToken(req, ctx) {
      const created = await createPersonalToken(
        deps,
        userIn(ctx),
        { name: req.name, ttlMs: req.ttl !== undefined ? positiveDurationMs(req.ttl) : undefined, role: roleFromProto(req.role) },
        callOf(ctx).correlationId,
      );
      return create(CreatePersonalTokenResponseSchema, { token: created.secret, personalToken: tokenToProto(created.token) });
    },
    async listPersonalTokens(req, ctx) {
      const tokens = await listPersonalTokens(deps, userIn(ctx).userId, req.includeRevoked);
      return create(ListPersonalTokensResponseSchema, { personalTokens: tokens.map(tokenToProto) });
    },
    async revokePersonalToken(req, ctx) {
      const token = await revokePersonalToken(deps, userIn(ctx), req.id, callOf(ctx).correlationId);
      return create(RevokePersonalTokenResponseSchema, { personalToken: tokenToProto(token) });
    },
  };
}
