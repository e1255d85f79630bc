// DownloadAgentRelease of modelforge.agent.v1.AgentService: a node fetches the release a rollout
// told it to update to, from an offset so an interrupted download resumes. Authorised like every
// node RPC (certificate, then its serial in the database), and narrower still: only a node that
// an open rollout is updating to this version may download it.
import { create } from "@bufbuild/protobuf";
import { Code, ConnectError, type ServiceImpl } from "@connectrpc/connect";
import { DownloadAgentReleaseResponseSchema } from "../../gen/proto/modelforge/agent/v1/agent_update_pb.js";
import type { AgentService } from "../../gen/proto/modelforge/agent/v1/agent_pb.js";
import type { PrismaClient } from "../../gen/prisma/client.js";
import type { Clock } from "../../common/clock.js";
import { authenticateNode } from "../identity/node-auth.js";
import { DOWNLOAD_CHUNK_BYTES } from "../artifacts/rules.js";
import type { ArtifactStore } from "../artifacts/store.js";
import { checkReleaseName } from "./release-rules.js";
import type { AgentReleases } from "./releases.js";

export function agentUpgrades(deps: {
  prisma: PrismaClient;
  clock: Clock;
  store: Pick<ArtifactStore, "blobs">;
  releases: AgentReleases;
}): Pick<ServiceImpl<typeof AgentService>, "downloadAgentRelease"> {
  return {
    async *downloadAgentRelease(req, ctx) {
      const { node } = await authenticateNode(deps.prisma, ctx, deps.clock);
      checkReleaseName(req);
      const updating = await deps.prisma.agentRolloutNode.count({
        where: { nodeId: node.id, state: "updating", rollout: { version: req.version, state: { in: ["running", "paused"] } } },
      });
      if (updating === 0) throw new ConnectError(`no open rollout is updating this node to ${req.version}`, Code.PermissionDenied);
      const release = await deps.releases.find(req);
      if (release === null) throw new ConnectError(`no release ${req.version} for ${req.platform}`, Code.NotFound);
      if (req.offset > release.sizeBytes) {
        throw new ConnectError(`offset ${req.offset} is past the release's ${release.sizeBytes} bytes`, Code.InvalidArgument);
      }
      const head = { sizeBytes: release.sizeBytes, sha256: release.sha256 };
      if (req.offset === release.sizeBytes) {
        yield create(DownloadAgentReleaseResponseSchema, head);
        return;
      }
      const chunks = deps.store.blobs.chunks(release.sha256, Number(req.offset), DOWNLOAD_CHUNK_BYTES, ctx.signal);
      let first = true;
      try {
        for await (const data of chunks) {
          yield create(DownloadAgentReleaseResponseSchema, { ...(first ? head : {}), data });
          first = false;
        }
      } catch (err) {
        // Nothing sent yet: the blob could not be opened here, which another replica may not share.
        if (first) throw new ConnectError("the release's stored content is missing on this replica", Code.Unavailable);
        throw err;
      }
    },
  };
}
