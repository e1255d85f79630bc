// What the artifact store accepts: pure checks of pushed chunks and file names, with the same
// repository, commit, path and digest rules as job specs (one grammar for both).
import { Code, ConnectError } from "@connectrpc/connect";
import { checkCommit, checkRelativePath, checkRepository, checkSha256, JobSpecError } from "../jobs/spec.js";
import { MAX_COMMIT_FILES, MAX_PUT_DATA_BYTES } from "../../common/artifacts.js";
import { MAX_ARTIFACT_PATH_BYTES } from "../../common/paths.js";

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

/**
 * Binary bytes of the largest valid PutArtifactFiles request: the data, and per file a path of at
 * most MAX_ARTIFACT_PATH_BYTES, a digest, a size and the framing (tags, lengths: 32 bytes is ample),
 * plus the commit's name.
 */
export const putArtifactFilesRequestBytes = MAX_PUT_DATA_BYTES + MAX_COMMIT_FILES * (MAX_ARTIFACT_PATH_BYTES + 64 + 32) + 1024;
/** Most characters of a path an error quotes back: enough to find the file, bounded whatever was sent. */
const QUOTED_PATH_CHARS = 120;

export interface PutFile {
  path: string;
  sizeBytes: bigint;
  sha256: string;
  /** The whole file, or empty to ask whether the store holds the content. */
  data: Uint8Array;
}

export interface PutFiles {
  repository: string;
  commit: string;
  files: PutFile[];
}

/** How an error names the i-th file of a call: its index and its path, quoted and bounded. */
export function fileLabel(index: number, path: string): string {
  const shown = path.length > QUOTED_PATH_CHARS ? `${path.slice(0, QUOTED_PATH_CHARS)}...` : path;
  return `files[${index}] ${JSON.stringify(shown)}`;
}

function checkPutFile(file: PutFile, label: string): void {
  try {
    checkRelativePath(file.path, `${label} path`);
    checkSha256(file.sha256, `${label} sha256`);
  } catch (err) {
    invalid(err);
  }
  if (file.sizeBytes <= 0n || file.sizeBytes > BigInt(MAX_STORED_FILE_BYTES)) {
    throw new ConnectError(`${label} size_bytes: must be from 1 to ${MAX_STORED_FILE_BYTES}`, Code.InvalidArgument);
  }
  if (file.data.byteLength !== 0 && BigInt(file.data.byteLength) !== file.sizeBytes) {
    throw new ConnectError(
      `${label} data: is ${file.data.byteLength} bytes, not size_bytes ${file.sizeBytes}; a file is sent whole here (a larger one with UploadArtifactChunk)`,
      Code.InvalidArgument,
    );
  }
}

/**
 * A PutArtifactFiles call: a commit name, 1 to MAX_COMMIT_FILES files of distinct paths, each file
 * named and sized by the artifact rules and sent whole or not at all, at most MAX_PUT_DATA_BYTES of
 * data in all. Digests are verified by the store, which holds the bytes.
 * @throws ConnectError invalid_argument naming the file and field.
 */
export function checkPutFiles(req: PutFiles): void {
  checkCommitName(req);
  if (req.files.length === 0) throw new ConnectError("files: is empty; send at least one file", Code.InvalidArgument);
  if (req.files.length > MAX_COMMIT_FILES) {
    throw new ConnectError(`files: holds ${req.files.length} files; at most ${MAX_COMMIT_FILES} per call`, Code.InvalidArgument);
  }
  const paths = new Set<string>();
  let dataBytes = 0;
  req.files.forEach((file, i) => {
    const label = fileLabel(i, file.path);
    checkPutFile(file, label);
    if (paths.has(file.path)) throw new ConnectError(`${label}: repeats a path of this call`, Code.InvalidArgument);
    paths.add(file.path);
    dataBytes += file.data.byteLength;
  });
  if (dataBytes > MAX_PUT_DATA_BYTES) {
    throw new ConnectError(`files: carry ${dataBytes} bytes of data; at most ${MAX_PUT_DATA_BYTES} per call`, Code.InvalidArgument);
  }
}
