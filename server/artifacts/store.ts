// The control plane's artifact store: an index of (repository, commit, path) -> (size, SHA-256)
// in the database, over content-addressed blobs on disk. Operators push files chunk by chunk;
// agents download them by name. A commit's file never changes: pushing different content under a
// name already stored is refused until that name is deleted.
import { Code, ConnectError } from "@connectrpc/connect";
import type { PrismaClient, StoredArtifact } from "../../gen/prisma/client.js";
import type { Clock } from "../../common/clock.js";
import { mapAtMost } from "../../common/concurrency.js";
import { recordAudit, type AuditActor } from "../audit/audit.js";
import { BlobStore } from "./blobs.js";
import { estimateFile } from "./gguf-header.js";
import { isGguf, type MemoryEstimate } from "./memory.js";
import { checkBatchRoom, recordBatch, refuseConflicts, storedByPath, verifyDigests } from "./put-files.js";
import { checkChunk, checkCommitRoom, checkPutFiles, fileLabel, type Chunk, type FileName, type PutFile, type PutFiles } from "./rules.js";

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

/** What the store holds of one file of a PutArtifactFiles call. */
export type PutOutcome = ChunkOutcome;

/** Blobs of one batch written at once: each waits mostly on its fsync. */
const BLOB_WRITES_AT_ONCE = 16;

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
  async putChunk(chunk: Chunk, correlationId: string, by: AuditActor): Promise<ChunkOutcome> {
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
        return { receivedBytes: size, complete: true, file: await this.record(chunk, correlationId, by) };
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
      return { receivedBytes: size, complete: true, file: await this.record(chunk, correlationId, by) };
    });
  }

  private async record(chunk: Chunk, correlationId: string, by: AuditActor): Promise<StoredArtifact> {
    const file = { path: chunk.path, sizeBytes: chunk.sizeBytes, sha256: chunk.sha256, data: new Uint8Array() };
    const batch = { repository: chunk.repository, commit: chunk.commit, files: [file] };
    const rows = await recordBatch(this.deps, batch, [file], await this.estimates([file]), correlationId, by);
    return rows.get(chunk.path)!;
  }

  /**
   * Stores a batch of small files sent whole (PutArtifactFiles): everything is checked and every
   * digest verified before a byte is written, then each missing content becomes a blob, and the
   * files whose content is held are recorded in one transaction. A file sent without data is
   * recorded only when its content is already held; otherwise it is answered with the bytes an
   * interrupted chunked upload left.
   */
  async putFiles(batch: PutFiles, correlationId: string, by: AuditActor): Promise<PutOutcome[]> {
    checkPutFiles(batch);
    verifyDigests(batch.files);
    const stored = await storedByPath(
      this.deps.prisma,
      batch,
      batch.files.map((f) => f.path),
    );
    refuseConflicts(batch, batch.files, stored);
    const adding = batch.files.filter((f) => !stored.has(f.path)).length;
    if (adding > 0) checkBatchRoom(batch, await this.filesOf(batch), adding);
    const held = await mapAtMost(batch.files, BLOB_WRITES_AT_ONCE, (file, i) => this.serialized(file.sha256, () => this.hold(file, i)));
    const complete = batch.files.filter((_, i) => held[i] === "blob");
    const rows =
      complete.length === 0
        ? new Map<string, StoredArtifact>()
        : await recordBatch(this.deps, batch, complete, await this.estimates(complete), correlationId, by);
    return batch.files.map((f, i) => {
      const row = rows.get(f.path);
      return row !== undefined
        ? { receivedBytes: Number(f.sizeBytes), complete: true, file: row }
        : { receivedBytes: held[i] as number, complete: false };
    });
  }

  /** Makes sure a file's content is a blob when it can be: "blob", or the bytes of an unfinished upload. */
  private async hold(file: PutFile, index: number): Promise<"blob" | number> {
    const blob = await this.blobs.blobSize(file.sha256);
    if (blob !== undefined) {
      if (blob === Number(file.sizeBytes)) return "blob";
      throw new ConnectError(
        `${fileLabel(index, file.path)}: content with this sha256 is stored with ${blob} bytes, not ${file.sizeBytes}`,
        Code.FailedPrecondition,
      );
    }
    if (file.data.byteLength === 0) return this.blobs.partSize(file.sha256);
    await this.blobs.putVerified(file.sha256, file.data);
    return "blob";
  }

  /** The GGUF headers of files being recorded, read once at push for placement to price later. */
  private async estimates(files: { path: string; sha256: string }[]): Promise<Map<string, MemoryEstimate>> {
    const out = new Map<string, MemoryEstimate>();
    for (const f of files.filter((f) => isGguf(f.path))) {
      const estimate = await estimateFile(this.blobs.blobPath(f.sha256));
      if (estimate !== undefined) out.set(f.path, estimate);
    }
    return out;
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
    by: AuditActor,
  ): Promise<{ deleted: number; freedBytes: number }> {
    const where = { repository: name.repository, commit: name.commit, ...(name.path ? { path: name.path } : {}) };
    const rows = await this.deps.prisma.$transaction(async (tx) => {
      const found = await tx.storedArtifact.findMany({ where });
      if (found.length === 0) return found;
      await tx.storedArtifact.deleteMany({ where });
      await recordAudit(
        tx,
        {
          ...by,
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
