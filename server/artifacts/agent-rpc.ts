// DownloadArtifactFile of modelforge.agent.v1.AgentService: a node fetches a stored file for an
// artifact.acquire.v1 job, from an offset so an interrupted download resumes. Authorised like
// every node RPC (certificate, then its serial in the database), and narrower still: only a file
// named by an artifact.acquire.v1 job currently leased to the calling node is served.
import { create } from "@bufbuild/protobuf";
import { Code, ConnectError, type ServiceImpl } from "@connectrpc/connect";
import { DownloadArtifactFileResponseSchema, type AgentService } from "../../gen/proto/modelforge/agent/v1/agent_pb.js";
import type { PrismaClient } from "../../gen/prisma/client.js";
import type { Clock } from "../../common/clock.js";
import { authenticateNode } from "../identity/node-auth.js";
import { specFromJson } from "../jobs/codec.js";
import { checkFileName, DOWNLOAD_CHUNK_BYTES, type FileName } from "./rules.js";
import type { ArtifactStore } from "./store.js";

/** Whether a job spec (as stored JSON) asks for this file. */
export function specNamesFile(specJson: unknown, name: FileName): boolean {
  const spec = specFromJson(specJson);
  if (spec.kind.case !== "artifactAcquire") return false;
  const a = spec.kind.value;
  return a.repository === name.repository && a.commit === name.commit && a.files.some((f) => f.path === name.path);
}

export function agentArtifacts(deps: {
  prisma: PrismaClient;
  clock: Clock;
  store: ArtifactStore;
}): Pick<ServiceImpl<typeof AgentService>, "downloadArtifactFile"> {
  return {
    async *downloadArtifactFile(req, ctx) {
      const { node } = await authenticateNode(deps.prisma, ctx, deps.clock);
      checkFileName(req);
      const leased = await deps.prisma.job.findMany({
        where: { nodeId: node.id, state: "leased", capability: "artifact.acquire.v1" },
        select: { spec: true },
      });
      if (!leased.some((job) => specNamesFile(job.spec, req))) {
        throw new ConnectError("no artifact.acquire.v1 job leased to this node names this file", Code.PermissionDenied);
      }
      const row = await deps.store.find(req);
      if (row === null) throw new ConnectError(`${req.repository}@${req.commit}:${req.path} is not in the artifact store`, Code.NotFound);
      if (req.offset > row.sizeBytes)
        throw new ConnectError(`offset ${req.offset} is past the file's ${row.sizeBytes} bytes`, Code.InvalidArgument);
      const head = { sizeBytes: row.sizeBytes, sha256: row.sha256 };
      if (req.offset === row.sizeBytes) {
        yield create(DownloadArtifactFileResponseSchema, head);
        return;
      }
      const stream = await deps.store.blobs.read(row.sha256, Number(req.offset), DOWNLOAD_CHUNK_BYTES).catch(() => {
        throw new ConnectError("the stored content is missing on this replica", Code.Unavailable);
      });
      let first = true;
      try {
        for await (const chunk of stream) {
          if (ctx.signal.aborted) return;
          yield create(DownloadArtifactFileResponseSchema, { ...(first ? head : {}), data: chunk as Buffer });
          first = false;
        }
      } finally {
        stream.destroy();
      }
    },
  };
}
