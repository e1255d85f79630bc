// The control plane's artifact store: an index of (repository, commit, path) -> (size, SHA-256)
// in the database, over content-addressed blobs on disk. Operators push files chunk by chunk;
// agents download them by name. A commit's file never changes: pushing different content under a
// name already stored is refused until that name is deleted.
import { Code, ConnectError } from "@connectrpc/connect";
import type { PrismaClient, StoredArtifact } from "../../gen/prisma/client.js";
import type { Clock } from "../../common/clock.js";
import { operatorActor, recordAudit } from "../audit/audit.js";
import { BlobStore } from "./blobs.js";
import { estimateFile } from "./gguf-header.js";
import { isGguf, memoryNeed } from "./memory.js";
import { checkChunk, checkCommitRoom, type Chunk, type FileName } from "./rules.js";

export interface ArtifactStoreDeps {
  prisma: PrismaClient;
  clock: Clock;
  /** Where blobs and unfinished uploads live. */
  dir: string;
}

export interface ChunkOutcome {
  receivedBytes: number;
  complete: boolean;
  file?: StoredArtifact;
}

export class ArtifactStore {
  readonly blobs: BlobStore;
  /** One push per digest at a time on this replica: chunks of one upload must not interleave. */
  private readonly locks = new Map<string, Promise<unknown>>();

  constructor(private readonly deps: ArtifactStoreDeps) {
    this.blobs = new BlobStore(deps.dir);
  }

  async find(name: FileName): Promise<StoredArtifact | null> {
    const { repository, commit, path } = name;
    return this.deps.prisma.storedArtifact.findUnique({ where: { repository_commit_path: { repository, commit, path } } });
  }

  /** Takes one chunk of a push; an empty chunk only asks how far the upload got. */
  async putChunk(chunk: Chunk, correlationId: string): Promise<ChunkOutcome> {
    checkChunk(chunk);
    const existing = await this.find(chunk);
    if (existing !== null && (existing.sha256 !== chunk.sha256 || existing.sizeBytes !== chunk.sizeBytes)) {
      throw new ConnectError(
        `${chunk.repository}@${chunk.commit}:${chunk.path} is already stored with other content; delete it first`,
        Code.AlreadyExists,
      );
    }
    // A new file's first call is refused before any byte is taken when its commit is full; the
    // insert checks again (record), where concurrent pushes to one commit are serialized.
    if (existing === null && chunk.offset === 0n) checkCommitRoom(chunk, await this.filesOf(chunk));
    return this.serialized(chunk.sha256, async () => {
      const size = Number(chunk.sizeBytes);
      const blob = await this.blobs.blobSize(chunk.sha256);
      if (blob !== undefined) {
        if (blob !== size)
          throw new ConnectError(`content with this sha256 is stored with ${blob} bytes, not ${size}`, Code.FailedPrecondition);
        return { receivedBytes: size, complete: true, file: await this.record(chunk, correlationId) };
      }
      const held = await this.blobs.partSize(chunk.sha256);
      if (chunk.data.byteLength === 0) return { receivedBytes: held, complete: false };
      const offset = Number(chunk.offset);
      // Offset 0 restarts an upload; anything else must continue exactly where it stands.
      if (offset !== 0 && offset !== held) {
        throw new ConnectError(`offset ${offset} does not continue the upload: ${held} bytes are held; resume from there`, Code.Aborted);
      }
      await this.blobs.writePart(chunk.sha256, offset, chunk.data);
      const received = offset + chunk.data.byteLength;
      if (received < size) return { receivedBytes: received, complete: false };
      if (!(await this.blobs.completePart(chunk.sha256))) {
        throw new ConnectError("the pushed content does not match sha256; the upload was discarded", Code.InvalidArgument);
      }
      return { receivedBytes: size, complete: true, file: await this.record(chunk, correlationId) };
    });
  }

  private async record(chunk: Chunk, correlationId: string): Promise<StoredArtifact> {
    const name = { repository: chunk.repository, commit: chunk.commit, path: chunk.path };
    // Read before the transaction: the header is read once, at push, for placement to price later.
    const estimate = isGguf(chunk.path) ? await estimateFile(this.blobs.blobPath(chunk.sha256)) : undefined;
    const estimated =
      estimate === undefined
        ? {}
        : {
            estimatedWeightsBytes: BigInt(estimate.weightsBytes),
            estimatedKvBytesPerToken: BigInt(estimate.kvBytesPerToken),
            estimatedContextLength: estimate.contextLength,
          };
    return this.deps.prisma.$transaction(async (tx) => {
      await tx.$queryRaw`SELECT 1 AS locked FROM (SELECT pg_advisory_xact_lock(hashtextextended(${`modelforge.artifact-commit:${chunk.repository}@${chunk.commit}`}, 0))) AS l`;
      const found = await tx.storedArtifact.findUnique({ where: { repository_commit_path: name } });
      // A file stored before estimates existed gets its estimate when it is pushed again.
      if (found !== null && found.estimatedWeightsBytes === null && estimate !== undefined) {
        return tx.storedArtifact.update({ where: { repository_commit_path: name }, data: estimated });
      }
      if (found !== null) return found;
      checkCommitRoom(chunk, await tx.storedArtifact.count({ where: { repository: chunk.repository, commit: chunk.commit } }));
      const row = await tx.storedArtifact.create({
        data: {
          ...name,
          sizeBytes: chunk.sizeBytes,
          sha256: chunk.sha256,
          createdAt: new Date(this.deps.clock.now()),
          ...estimated,
        },
      });
      await recordAudit(
        tx,
        {
          actor: operatorActor,
          action: "artifact.stored",
          targetType: "artifact",
          targetId: `${chunk.repository}@${chunk.commit}`,
          correlationId,
          details: {
            path: chunk.path,
            sha256: chunk.sha256,
            sizeBytes: String(chunk.sizeBytes),
            ...(estimate !== undefined ? { estimatedMemoryBytes: String(memoryNeed(estimate, 0)) } : {}),
          },
        },
        new Date(this.deps.clock.now()),
      );
      return row;
    });
  }

  private filesOf(name: { repository: string; commit: string }): Promise<number> {
    return this.deps.prisma.storedArtifact.count({ where: { repository: name.repository, commit: name.commit } });
  }

  async list(filter: { repository?: string; commit?: string }, skip: number, take: number): Promise<StoredArtifact[]> {
    return this.deps.prisma.storedArtifact.findMany({
      where: { ...(filter.repository ? { repository: filter.repository } : {}), ...(filter.commit ? { commit: filter.commit } : {}) },
      orderBy: [{ repository: "asc" }, { commit: "asc" }, { path: "asc" }],
      skip,
      take,
    });
  }

  /** Removes a commit's files (or one), then any blob nothing refers to any more. */
  async delete(
    name: { repository: string; commit: string; path?: string },
    correlationId: string,
  ): Promise<{ deleted: number; freedBytes: number }> {
    const where = { repository: name.repository, commit: name.commit, ...(name.path ? { path: name.path } : {}) };
    const rows = await this.deps.prisma.$transaction(async (tx) => {
      const found = await tx.storedArtifact.findMany({ where });
      if (found.length === 0) return found;
      await tx.storedArtifact.deleteMany({ where });
      await recordAudit(
        tx,
        {
          actor: operatorActor,
          action: "artifact.deleted",
          targetType: "artifact",
          targetId: `${name.repository}@${name.commit}`,
          correlationId,
          details: { files: String(found.length), ...(name.path ? { path: name.path } : {}) },
        },
        new Date(this.deps.clock.now()),
      );
      return found;
    });
    if (rows.length === 0)
      throw new ConnectError(`nothing stored for ${name.repository}@${name.commit}${name.path ? `:${name.path}` : ""}`, Code.NotFound);
    let freedBytes = 0;
    for (const sha256 of new Set(rows.map((r) => r.sha256))) {
      await this.serialized(sha256, async () => {
        if ((await this.deps.prisma.storedArtifact.count({ where: { sha256 } })) > 0) return;
        freedBytes += (await this.blobs.blobSize(sha256)) ?? 0;
        await this.blobs.remove(sha256);
      });
    }
    return { deleted: rows.length, freedBytes };
  }

  private serialized<T>(key: string, work: () => Promise<T>): Promise<T> {
    const before = this.locks.get(key) ?? Promise.resolve();
    const run = before.then(work, work);
    const settled = run.catch(() => undefined);
    this.locks.set(key, settled);
    void settled.then(() => {
      if (this.locks.get(key) === settled) this.locks.delete(key);
    });
    return run;
  }
}
