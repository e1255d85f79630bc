// PutArtifactFiles' steps beside the store: verifying a batch's bytes before anything is written,
// refusing names stored with other content, and recording a batch of files in one transaction.
import { createHash } from "node:crypto";
import { Code, ConnectError } from "@connectrpc/connect";
import type { PrismaClient, StoredArtifact } from "../../gen/prisma/client.js";
import type { Clock } from "../../common/clock.js";
import { MAX_COMMIT_FILES } from "../../common/artifacts.js";
import { recordAudits, type AuditActor } from "../audit/audit.js";
import { memoryNeed, type MemoryEstimate } from "./memory.js";
import { fileLabel, type PutFile, type PutFiles } from "./rules.js";

/** @throws ConnectError invalid_argument naming the first file whose data does not match its sha256. */
export function verifyDigests(files: PutFile[]): void {
  files.forEach((file, i) => {
    if (file.data.byteLength === 0) return;
    if (createHash("sha256").update(file.data).digest("hex") !== file.sha256) {
      throw new ConnectError(`${fileLabel(i, file.path)}: the data does not match sha256; nothing was stored`, Code.InvalidArgument);
    }
  });
}

/** @throws ConnectError already_exists naming the first file stored under its name with other content. */
export function refuseConflicts(name: { repository: string; commit: string }, files: PutFile[], stored: Map<string, StoredArtifact>): void {
  files.forEach((file, i) => {
    const found = stored.get(file.path);
    if (found !== undefined && (found.sha256 !== file.sha256 || found.sizeBytes !== file.sizeBytes)) {
      throw new ConnectError(
        `${fileLabel(i, file.path)}: ${name.repository}@${name.commit} already stores this path with other content; delete it first`,
        Code.AlreadyExists,
      );
    }
  });
}

/** @throws ConnectError invalid_argument when `adding` new names would overfill a commit holding `held`. */
export function checkBatchRoom(name: { repository: string; commit: string }, held: number, adding: number): void {
  if (held + adding > MAX_COMMIT_FILES) {
    throw new ConnectError(
      `${name.repository}@${name.commit} holds ${held} files and this call adds ${adding}; a commit holds at most ${MAX_COMMIT_FILES}`,
      Code.InvalidArgument,
    );
  }
}

export async function storedByPath(
  db: Pick<PrismaClient, "storedArtifact">,
  batch: PutFiles,
  paths: string[],
): Promise<Map<string, StoredArtifact>> {
  const rows = await db.storedArtifact.findMany({ where: { repository: batch.repository, commit: batch.commit, path: { in: paths } } });
  return new Map(rows.map((r) => [r.path, r]));
}

const estimateColumns = (estimate: MemoryEstimate) => ({
  estimatedWeightsBytes: BigInt(estimate.weightsBytes),
  estimatedKvBytesPerToken: BigInt(estimate.kvBytesPerToken),
  estimatedContextLength: estimate.contextLength,
});

export interface RecordBatchDeps {
  prisma: PrismaClient;
  clock: Clock;
}

/**
 * Records `files` (their content held) in the commit, all in one transaction under the commit's
 * lock: names already stored with the same content are answered as they are (a GGUF stored before
 * estimates existed gets its estimate), new names are inserted with one audit event each.
 */
export async function recordBatch(
  deps: RecordBatchDeps,
  batch: PutFiles,
  files: PutFile[],
  estimates: Map<string, MemoryEstimate>,
  correlationId: string,
  by: AuditActor,
): Promise<Map<string, StoredArtifact>> {
  const at = new Date(deps.clock.now());
  return deps.prisma.$transaction(async (tx) => {
    await tx.$queryRaw`SELECT 1 AS locked FROM (SELECT pg_advisory_xact_lock(hashtextextended(${`modelforge.artifact-commit:${batch.repository}@${batch.commit}`}, 0))) AS l`;
    const stored = await storedByPath(
      tx,
      batch,
      files.map((f) => f.path),
    );
    refuseConflicts(batch, files, stored);
    const fresh = files.filter((f) => !stored.has(f.path));
    if (fresh.length > 0) {
      checkBatchRoom(batch, await tx.storedArtifact.count({ where: { repository: batch.repository, commit: batch.commit } }), fresh.length);
    }
    for (const row of [...stored.values()]) {
      const estimate = estimates.get(row.path);
      if (row.estimatedWeightsBytes !== null || estimate === undefined) continue;
      const where = { repository_commit_path: { repository: row.repository, commit: row.commit, path: row.path } };
      stored.set(row.path, await tx.storedArtifact.update({ where, data: estimateColumns(estimate) }));
    }
    const name = { repository: batch.repository, commit: batch.commit };
    const created = await tx.storedArtifact.createManyAndReturn({
      data: fresh.map((f) => {
        const estimate = estimates.get(f.path);
        return {
          ...name,
          path: f.path,
          sizeBytes: f.sizeBytes,
          sha256: f.sha256,
          createdAt: at,
          ...(estimate ? estimateColumns(estimate) : {}),
        };
      }),
    });
    await recordAudits(
      tx,
      fresh.map((f) => {
        const estimate = estimates.get(f.path);
        return {
          ...by,
          action: "artifact.stored",
          targetType: "artifact" as const,
          targetId: `${batch.repository}@${batch.commit}`,
          correlationId,
          details: {
            path: f.path,
            sha256: f.sha256,
            sizeBytes: String(f.sizeBytes),
            ...(estimate !== undefined ? { estimatedMemoryBytes: String(memoryNeed(estimate, 0)) } : {}),
          },
        };
      }),
      at,
    );
    for (const row of created) stored.set(row.path, row);
    return stored;
  });
}
