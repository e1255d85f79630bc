// The artifact store's RPCs of modelforge.admin.v1.AdminService (the admin token is checked by the
// interceptor before these run).
import { create } from "@bufbuild/protobuf";
import type { ServiceImpl } from "@connectrpc/connect";
import {
  DeleteArtifactFilesResponseSchema,
  ListArtifactFilesResponseSchema,
  MemoryEstimateSchema,
  PutArtifactFileResultSchema,
  PutArtifactFilesResponseSchema,
  StoredArtifactFileSchema,
  UploadArtifactChunkResponseSchema,
  type AdminService,
} from "../../gen/proto/modelforge/admin/v1/admin_pb.js";
import type { StoredArtifact } from "../../gen/prisma/client.js";
import { callOf } from "../context.js";
import { actorIn } from "../identity/operators/principal.js";
import { ts } from "../rpc/convert.js";
import { decodeOffset, encodePageToken, pageSizeOf, splitPage } from "../rpc/paging.js";
import { checkCommitName, checkFileName } from "./rules.js";
import { memoryNeed, storedEstimate } from "./memory.js";
import type { ArtifactStore } from "./store.js";

type ArtifactAdminRpcs = Pick<
  ServiceImpl<typeof AdminService>,
  "uploadArtifactChunk" | "putArtifactFiles" | "listArtifactFiles" | "deleteArtifactFiles"
>;

function toProto(row: StoredArtifact) {
  const estimate = storedEstimate(row);
  return create(StoredArtifactFileSchema, {
    repository: row.repository,
    commit: row.commit,
    path: row.path,
    sizeBytes: row.sizeBytes,
    sha256: row.sha256,
    createdAt: ts(row.createdAt),
    ...(estimate !== undefined
      ? {
          memoryEstimate: create(MemoryEstimateSchema, {
            weightsBytes: BigInt(estimate.weightsBytes),
            kvCacheBytesPerToken: BigInt(estimate.kvBytesPerToken),
            contextLength: estimate.contextLength,
            estimatedBytes: BigInt(memoryNeed(estimate, 0)),
          }),
        }
      : {}),
  });
}

export function adminArtifacts(store: ArtifactStore): ArtifactAdminRpcs {
  return {
    async uploadArtifactChunk(req, ctx) {
      const outcome = await store.putChunk(req, callOf(ctx).correlationId, actorIn(ctx));
      return create(UploadArtifactChunkResponseSchema, {
        receivedBytes: BigInt(outcome.receivedBytes),
        complete: outcome.complete,
        ...(outcome.file !== undefined ? { file: toProto(outcome.file) } : {}),
      });
    },
    async putArtifactFiles(req, ctx) {
      const outcomes = await store.putFiles(req, callOf(ctx).correlationId, actorIn(ctx));
      return create(PutArtifactFilesResponseSchema, {
        files: outcomes.map((o) =>
          create(PutArtifactFileResultSchema, {
            complete: o.complete,
            receivedBytes: BigInt(o.receivedBytes),
            ...(o.file !== undefined ? { file: toProto(o.file) } : {}),
          }),
        ),
      });
    },
    async listArtifactFiles(req) {
      if (req.repository !== "") {
        if (req.commit !== "") checkCommitName(req);
        else checkCommitName({ repository: req.repository, commit: "0".repeat(40) });
      }
      const size = pageSizeOf(req.pageSize);
      const offset = decodeOffset(req.pageToken);
      const rows = await store.list({ repository: req.repository, commit: req.commit }, offset, size + 1);
      const { page, more } = splitPage(rows, size);
      return create(ListArtifactFilesResponseSchema, {
        files: page.map(toProto),
        nextPageToken: more ? encodePageToken(String(offset + size)) : "",
      });
    },
    async deleteArtifactFiles(req, ctx) {
      if (req.path !== "") checkFileName(req);
      else checkCommitName(req);
      const { deleted, freedBytes } = await store.delete(
        req.path !== "" ? req : { repository: req.repository, commit: req.commit },
        callOf(ctx).correlationId,
        actorIn(ctx),
      );
      return create(DeleteArtifactFilesResponseSchema, { deletedFiles: deleted, freedBytes: BigInt(freedBytes) });
    },
  };
}
