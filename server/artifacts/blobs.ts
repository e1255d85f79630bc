// The artifact store's content on disk, addressed by SHA-256: `blobs/<first two hex>/<sha256>`
// for verified content, `uploads/<sha256>.part` while a push is under way. A digest names its
// bytes, so two commits sharing a file share one blob, and a blob is only ever created by
// renaming a fully verified upload into place.
import { createHash, randomUUID } from "node:crypto";
import { constants, createReadStream, type ReadStream } from "node:fs";
import { lstat, mkdir, open, rename, rm } from "node:fs/promises";
import { join } from "node:path";

const O_APPEND = constants.O_WRONLY | constants.O_CREAT | constants.O_NOFOLLOW;
const O_READ = constants.O_RDONLY | constants.O_NOFOLLOW;
const O_NEW = constants.O_WRONLY | constants.O_CREAT | constants.O_EXCL | constants.O_NOFOLLOW;

export class BlobStore {
  constructor(readonly dir: string) {}

  /** Where a verified blob lives (public for readers that take a path: the GGUF header reader). */
  blobPath(sha256: string): string {
    return join(this.dir, "blobs", sha256.slice(0, 2), sha256);
  }
  private partPath(sha256: string): string {
    return join(this.dir, "uploads", `${sha256}.part`);
  }

  /** Size of the verified blob, or undefined if there is none. */
  async blobSize(sha256: string): Promise<number | undefined> {
    return regularFileSize(this.blobPath(sha256));
  }

  /** Bytes of an unfinished upload held so far. */
  async partSize(sha256: string): Promise<number> {
    return (await regularFileSize(this.partPath(sha256))) ?? 0;
  }

  /** Writes `data` at `offset` of the upload (the caller checked offset against partSize). */
  async writePart(sha256: string, offset: number, data: Uint8Array): Promise<void> {
    await mkdir(join(this.dir, "uploads"), { recursive: true, mode: 0o700 });
    const fh = await open(this.partPath(sha256), O_APPEND, 0o600);
    try {
      if (offset === 0) await fh.truncate(0);
      await fh.write(data, 0, data.byteLength, offset);
    } finally {
      await fh.close();
    }
  }

  /**
   * Verifies the finished upload against its digest and makes it the blob. Returns false (and
   * drops the upload) when the content does not match.
   */
  async completePart(sha256: string): Promise<boolean> {
    const part = this.partPath(sha256);
    const fh = await open(part, O_READ);
    const hash = createHash("sha256");
    try {
      await fh.sync();
      for await (const chunk of fh.createReadStream({ autoClose: false, highWaterMark: 1 << 20 })) hash.update(chunk as Buffer);
    } finally {
      await fh.close();
    }
    if (hash.digest("hex") !== sha256) {
      await rm(part, { force: true });
      return false;
    }
    await mkdir(join(this.dir, "blobs", sha256.slice(0, 2)), { recursive: true, mode: 0o700 });
    await rename(part, this.blobPath(sha256));
    return true;
  }

  /**
   * Makes `data`, already verified against `sha256` by the caller, the blob: written durably under
   * a name of its own (a chunked upload of the same digest may be under way) and renamed into place.
   */
  async putVerified(sha256: string, data: Uint8Array): Promise<void> {
    await mkdir(join(this.dir, "uploads"), { recursive: true, mode: 0o700 });
    const temporary = join(this.dir, "uploads", `${sha256}.${randomUUID()}.whole`);
    const fh = await open(temporary, O_NEW, 0o600);
    try {
      await fh.write(data, 0, data.byteLength, 0);
      await fh.sync();
    } catch (err) {
      await rm(temporary, { force: true });
      throw err;
    } finally {
      await fh.close();
    }
    await mkdir(join(this.dir, "blobs", sha256.slice(0, 2)), { recursive: true, mode: 0o700 });
    await rename(temporary, this.blobPath(sha256));
  }

  /** The blob's bytes from `offset`, read in chunks of at most `chunkBytes`. */
  async read(sha256: string, offset: number, chunkBytes: number): Promise<ReadStream> {
    const fh = await open(this.blobPath(sha256), O_READ);
    return createReadStream("", { fd: fh, start: offset, highWaterMark: chunkBytes });
  }

  /** The blob's chunks from `offset`, until the end or until `signal` aborts; the file is closed either way. */
  async *chunks(sha256: string, offset: number, chunkBytes: number, signal: AbortSignal): AsyncGenerator<Buffer> {
    const stream = await this.read(sha256, offset, chunkBytes);
    try {
      for await (const chunk of stream) {
        if (signal.aborted) return;
        yield chunk as Buffer;
      }
    } finally {
      stream.destroy();
    }
  }

  async remove(sha256: string): Promise<void> {
    await rm(this.blobPath(sha256), { force: true });
  }
}

async function regularFileSize(path: string): Promise<number | undefined> {
  const st = await lstat(path).catch((err: NodeJS.ErrnoException) => {
    if (err.code === "ENOENT") return undefined;
    throw err;
  });
  return st?.isFile() ? st.size : undefined;
}
