// What the artifact store accepts: pure checks of pushed chunks and file names, with the same
// repository, commit, path and digest rules as job specs (one grammar for both).
import { Code, ConnectError } from "@connectrpc/connect";
import { checkCommit, checkRelativePath, checkRepository, checkSha256, JobSpecError } from "../jobs/spec.js";

/** Largest chunk of one UploadArtifactChunk call; well under every per-method message limit. */
export const MAX_UPLOAD_CHUNK_BYTES = 1024 * 1024;
/** Largest chunk of a DownloadArtifactFile answer. */
export const DOWNLOAD_CHUNK_BYTES = 1024 * 1024;
/** Largest file the store takes: 1 TiB. */
export const MAX_STORED_FILE_BYTES = 2 ** 40;

export interface FileName {
  repository: string;
  commit: string;
  path: string;
}

function invalid(err: unknown): never {
  if (err instanceof JobSpecError) throw new ConnectError(err.message, Code.InvalidArgument);
  throw err;
}

/** @throws ConnectError invalid_argument naming the field. */
export function checkFileName(name: FileName): void {
  try {
    checkRepository(name.repository, "repository");
    checkCommit(name.commit, "commit");
    checkRelativePath(name.path, "path");
  } catch (err) {
    invalid(err);
  }
}

/** @throws ConnectError invalid_argument naming the field. */
export function checkCommitName(name: { repository: string; commit: string }): void {
  try {
    checkRepository(name.repository, "repository");
    checkCommit(name.commit, "commit");
  } catch (err) {
    invalid(err);
  }
}

export interface Chunk extends FileName {
  sizeBytes: bigint;
  sha256: string;
  offset: bigint;
  data: Uint8Array;
}

/** @throws ConnectError invalid_argument naming the field. */
export function checkChunk(chunk: Chunk): void {
  checkFileName(chunk);
  try {
    checkSha256(chunk.sha256, "sha256");
  } catch (err) {
    invalid(err);
  }
  const bad = (field: string, reason: string) => {
    throw new ConnectError(`${field}: ${reason}`, Code.InvalidArgument);
  };
  if (chunk.sizeBytes <= 0n || chunk.sizeBytes > BigInt(MAX_STORED_FILE_BYTES))
    bad("size_bytes", `must be from 1 to ${MAX_STORED_FILE_BYTES}`);
  if (chunk.data.byteLength > MAX_UPLOAD_CHUNK_BYTES)
    bad("data", `is ${chunk.data.byteLength} bytes; at most ${MAX_UPLOAD_CHUNK_BYTES} per call`);
  if (chunk.offset + BigInt(chunk.data.byteLength) > chunk.sizeBytes) bad("data", "runs past size_bytes");
}
