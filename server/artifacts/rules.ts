// What the artifact store accepts: pure checks of pushed chunks and file names, with the same
// repository, commit, path and digest rules as job specs (one grammar for both).
import { Code, ConnectError } from "@connectrpc/connect";
import { checkCommit, checkRelativePath, checkRepository, checkSha256, JobSpecError } from "../jobs/spec.js";
import { MAX_COMMIT_FILES } from "../../common/artifacts.js";

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

/**
 * A new file may join a commit that holds `held` files only while the commit has room.
 * @throws ConnectError invalid_argument naming the bound.
 */
export function checkCommitRoom(name: { repository: string; commit: string }, held: number): void {
  if (held >= MAX_COMMIT_FILES) {
    throw new ConnectError(
      `${name.repository}@${name.commit} already holds ${held} files; a commit holds at most ${MAX_COMMIT_FILES}`,
      Code.InvalidArgument,
    );
  }
}
