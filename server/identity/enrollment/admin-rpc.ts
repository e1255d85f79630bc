// The enrollment token RPCs of modelforge.admin.v1.AdminService: create, list, revoke (the admin
// token is checked by the interceptor before these run). The secret leaves the server once, in
// CreateEnrollmentToken's answer.
import { create } from "@bufbuild/protobuf";
import type { ServiceImpl } from "@connectrpc/connect";
import {
  type AdminService,
  CreateEnrollmentTokenResponseSchema,
  ListEnrollmentTokensResponseSchema,
  RevokeEnrollmentTokenResponseSchema,
} from "../../../gen/proto/modelforge/admin/v1/admin_pb.js";
import { callOf } from "../../context.js";
import { decodeOffset, encodePageToken, pageSizeOf, splitPage } from "../../rpc/paging.js";
import { positiveDurationMs } from "../../rpc/time.js";
import { tokenToProto } from "./codec.js";
import { actorIn } from "../operators/principal.js";
import { createEnrollmentToken, listEnrollmentTokens, revokeEnrollmentToken, type TokenDeps } from "./tokens.js";

type EnrollmentTokenRpcs = Pick<
  ServiceImpl<typeof AdminService>,
  "createEnrollmentToken" | "listEnrollmentTokens" | "revokeEnrollmentToken"
>;

export function adminEnrollmentTokens(deps: TokenDeps): EnrollmentTokenRpcs {
  const now = () => new Date(deps.clock.now());
  return {
    async createEnrollmentToken(req, ctx) {
      const created = await createEnrollmentToken(deps, {
        nodeName: req.nodeName,
        nodeId: req.nodeId,
        ttlMs: req.ttl !== undefined ? positiveDurationMs(req.ttl) : undefined,
        labels: req.labels,
        correlationId: callOf(ctx).correlationId,
        by: actorIn(ctx),
      });
      return create(CreateEnrollmentTokenResponseSchema, {
        token: created.secret,
        enrollmentToken: tokenToProto(created.token, now()),
        joinCommand: created.joinCommand,
      });
    },
    async listEnrollmentTokens(req) {
      const size = pageSizeOf(req.pageSize);
      const offset = decodeOffset(req.pageToken);
      const { page, more } = splitPage(await listEnrollmentTokens(deps, size, offset), size);
      return create(ListEnrollmentTokensResponseSchema, {
        enrollmentTokens: page.map((t) => tokenToProto(t, now())),
        nextPageToken: more ? encodePageToken(String(offset + size)) : "",
      });
    },
    async revokeEnrollmentToken(req, ctx) {
      const token = await revokeEnrollmentToken(deps, req.id, callOf(ctx).correlationId, actorIn(ctx));
      return create(RevokeEnrollmentTokenResponseSchema, { enrollmentToken: tokenToProto(token, now()) });
    },
  };
}
