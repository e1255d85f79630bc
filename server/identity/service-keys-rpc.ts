// The service-key RPCs of modelforge.admin.v1.AdminService (the admin token is checked by the
// interceptor before these run). The secret leaves the server once, in CreateServiceKey's answer.
import { create } from "@bufbuild/protobuf";
import type { ServiceImpl } from "@connectrpc/connect";
import {
  CreateServiceKeyResponseSchema,
  ListServiceKeysResponseSchema,
  RevokeServiceKeyResponseSchema,
  ServiceKeySchema,
  type AdminService,
} from "../../gen/proto/modelforge/admin/v1/admin_pb.js";
import type { ServiceKey as KeyRow } from "../../gen/prisma/client.js";
import { callOf } from "../context.js";
import { ts } from "../rpc/convert.js";
import { decodeOffset, encodePageToken, pageSizeOf, splitPage } from "../rpc/paging.js";
import { positiveDurationMs } from "../rpc/time.js";
import type { ServiceKeys } from "./service-keys.js";

type ServiceKeyRpcs = Pick<ServiceImpl<typeof AdminService>, "createServiceKey" | "listServiceKeys" | "revokeServiceKey">;

const toProto = (row: KeyRow) =>
  create(ServiceKeySchema, {
    id: row.id,
    name: row.name,
    prefix: row.prefix,
    deployments: row.deployments,
    createdAt: ts(row.createdAt),
    expiresAt: ts(row.expiresAt),
    revokedAt: ts(row.revokedAt),
  });

export function adminServiceKeys(keys: ServiceKeys): ServiceKeyRpcs {
  return {
    async createServiceKey(req, ctx) {
      const ttlMs = req.ttl === undefined ? undefined : positiveDurationMs(req.ttl);
      const { row, secret } = await keys.create({ name: req.name, deployments: req.deployments, ttlMs }, callOf(ctx).correlationId);
      return create(CreateServiceKeyResponseSchema, { key: toProto(row), secret });
    },
    async listServiceKeys(req) {
      const size = pageSizeOf(req.pageSize);
      const offset = decodeOffset(req.pageToken);
      const { page, more } = splitPage(await keys.list(offset, size + 1, req.includeRevoked), size);
      return create(ListServiceKeysResponseSchema, {
        keys: page.map(toProto),
        nextPageToken: more ? encodePageToken(String(offset + size)) : "",
      });
    },
    async revokeServiceKey(req, ctx) {
      return create(RevokeServiceKeyResponseSchema, { key: toProto(await keys.revoke(req.id, req.reason, callOf(ctx).correlationId)) });
    },
  };
}
