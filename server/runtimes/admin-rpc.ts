// The runtime-profile RPCs of modelforge.admin.v1.AdminService (the admin token is checked by the
// interceptor before these run).
import { create } from "@bufbuild/protobuf";
import type { ServiceImpl } from "@connectrpc/connect";
import {
  CreateRuntimeProfileResponseSchema,
  ListRuntimeProfilesResponseSchema,
  RuntimeProfileSchema,
  type AdminService,
} from "../../gen/proto/modelforge/admin/v1/admin_pb.js";
import type { RuntimeProfile as ProfileRow } from "../../gen/prisma/client.js";
import { callOf } from "../context.js";
import { actorIn } from "../identity/operators/principal.js";
import { ts } from "../rpc/convert.js";
import { decodeOffset, encodePageToken, pageSizeOf, splitPage } from "../rpc/paging.js";
import { specOf, type RuntimeProfiles } from "./store.js";

type RuntimeProfileRpcs = Pick<ServiceImpl<typeof AdminService>, "createRuntimeProfile" | "listRuntimeProfiles">;

const toProto = (row: ProfileRow) => create(RuntimeProfileSchema, { name: row.name, spec: specOf(row), createdAt: ts(row.createdAt) });

export function adminRuntimeProfiles(profiles: RuntimeProfiles): RuntimeProfileRpcs {
  return {
    async createRuntimeProfile(req, ctx) {
      const { row, created } = await profiles.create(
        {
          name: req.name,
          engine: req.engine,
          contextSize: req.contextSize,
          threads: req.threads,
          memoryBytes: req.memoryBytes,
          gpuLayers: req.gpuLayers,
          gpuLayersAll: req.gpuLayersAll,
          gpuCount: req.gpuCount,
          gpuMemoryBytes: req.gpuMemoryBytes,
          gpuShared: req.gpuShared,
          parallel: req.parallel,
          batchSize: req.batchSize,
          embeddings: req.embeddings,
        },
        callOf(ctx).correlationId,
        actorIn(ctx),
      );
      return create(CreateRuntimeProfileResponseSchema, { profile: toProto(row), created });
    },
    async listRuntimeProfiles(req) {
      const size = pageSizeOf(req.pageSize);
      const offset = decodeOffset(req.pageToken);
      const { page, more } = splitPage(await profiles.list(offset, size + 1), size);
      return create(ListRuntimeProfilesResponseSchema, {
        profiles: page.map(toProto),
        nextPageToken: more ? encodePageToken(String(offset + size)) : "",
      });
    },
  };
}
