// The service-key RPCs of modelforge.admin.v1.AdminService (the caller is checked by the
// interceptor before these run). The secret leaves the server once, in CreateServiceKey's answer.
import { create } from "@bufbuild/protobuf";
import type { ServiceImpl } from "@connectrpc/connect";
import {
  CreateServiceKeyResponseSchema,
  ListServiceKeysResponseSchema,
  RevokeServiceKeyResponseSchema,
  ServiceKeyLimitsSchema,
  ServiceKeySchema,
  UpdateServiceKeyLimitsResponseSchema,
  type AdminService,
  type ServiceKeyLimits,
} from "../../gen/proto/modelforge/admin/v1/admin_pb.js";
import type { ServiceKey as KeyRow } from "../../gen/prisma/client.js";
import { callOf } from "../context.js";
import { actorIn, principalIn, type Principal } from "./operators/principal.js";
import { userRefToProto } from "./operators/codec.js";
import { ts } from "../rpc/convert.js";
import { decodeOffset, encodePageToken, pageSizeOf, splitPage } from "../rpc/paging.js";
import { positiveDurationMs } from "../rpc/time.js";
import { limitsOf, noLimits, type ServiceKeys } from "./service-keys.js";
import { hasLimits, type KeyLimits } from "../usage/limit-rules.js";

type ServiceKeyRpcs = Pick<
  ServiceImpl<typeof AdminService>,
  "createServiceKey" | "listServiceKeys" | "revokeServiceKey" | "updateServiceKeyLimits"
>;

/** The contract's limits (0 for none) as the server keeps them (null for none). */
function limitsFromProto(l: ServiceKeyLimits | undefined): KeyLimits {
  if (l === undefined) return noLimits;
  const none = (n: number | bigint) => (n === 0 || n === 0n ? null : Number(n));
  return {
    rpm: none(l.requestsPerMinute),
    tpm: none(l.tokensPerMinute),
    dailyTokens: none(l.dailyTokens),
    monthlyTokens: none(l.monthlyTokens),
  };
}

function limitsToProto(row: KeyRow) {
  const l = limitsOf(row);
  if (!hasLimits(l)) return undefined;
  return create(ServiceKeyLimitsSchema, {
    requestsPerMinute: l.rpm ?? 0,
    tokensPerMinute: l.tpm ?? 0,
    dailyTokens: BigInt(l.dailyTokens ?? 0),
    monthlyTokens: BigInt(l.monthlyTokens ?? 0),
  });
}

/** A key's owner, when a user (not a break-glass key) made it. */
const ownerOf = (p: Principal): string | undefined => (p.kind === "user" ? p.userId : undefined);

const toProto = (row: KeyRow & { owner?: { id: string; email: string } | null }) =>
  create(ServiceKeySchema, {
    id: row.id,
    name: row.name,
    prefix: row.prefix,
    deployments: row.deployments,
    createdAt: ts(row.createdAt),
    expiresAt: ts(row.expiresAt),
    revokedAt: ts(row.revokedAt),
    limits: limitsToProto(row),
    lastUsedAt: ts(row.lastUsedAt),
    ...(row.owner ? { owner: userRefToProto(row.owner) } : {}),
  });

export function adminServiceKeys(keys: ServiceKeys): ServiceKeyRpcs {
  return {
    async createServiceKey(req, ctx) {
      const ttlMs = req.ttl === undefined ? undefined : positiveDurationMs(req.ttl);
      const { row, secret } = await keys.create(
        {
          name: req.name,
          deployments: req.deployments,
          ttlMs,
          limits: limitsFromProto(req.limits),
          ownerUserId: ownerOf(principalIn(ctx)),
        },
        callOf(ctx).correlationId,
        actorIn(ctx),
      );
      return create(CreateServiceKeyResponseSchema, { key: toProto(row), secret });
    },
    async listServiceKeys(req) {
      const size = pageSizeOf(req.pageSize);
      const offset = decodeOffset(req.pageToken);
      const { page, more } = splitPage(await keys.list(offset, size + 1, req.includeRevoked, req.owner), size);
      return create(ListServiceKeysResponseSchema, {
        keys: page.map(toProto),
        nextPageToken: more ? encodePageToken(String(offset + size)) : "",
      });
    },
    async updateServiceKeyLimits(req, ctx) {
      const row = await keys.updateLimits(req.id, limitsFromProto(req.limits), callOf(ctx).correlationId, actorIn(ctx));
      return create(UpdateServiceKeyLimitsResponseSchema, { key: toProto(row) });
    },
    async revokeServiceKey(req, ctx) {
      return create(RevokeServiceKeyResponseSchema, {
        key: toProto(await keys.revoke(req.id, req.reason, callOf(ctx).correlationId, actorIn(ctx))),
      });
    },
  };
}
