// Hashing and writing of downloaded bytes on a worker thread, so the thread that receives them
// does nothing else: on a busy two-core machine, SHA-256 and per-chunk write round trips on the
// receiving thread cut acquisition throughput to a third of the source's raw speed.
//
// The worker gets the file's descriptor (descriptors are process-wide), hashes the bytes already
// in the file (a resume), then hashes each batch it is sent and writes it at the next position
// through the thread pool. A batch is the mirror client's pooled buffers (or node:http's own
// chunks), moved rather than copied; once written, each buffer moves back to the pool.
// The sender waits only when more than MAX_BACKLOG_BYTES are queued.
import { Worker } from "node:worker_threads";
import { giveBack, isPoolChunk, POOL_BUFFER_BYTES, takeBuffer, trimPool } from "./buffer-pool.js";

const MAX_BACKLOG_BYTES = 32 * 1024 * 1024;
/** Chunks are gathered into batches of this size and moved (not copied) to the worker. */
const BATCH_BYTES = 1024 * 1024;

/** Writing or hashing on the node failed (not the source): never a reason to try another source. */
export class ArtifactWriteError extends Error {
  override readonly name = "ArtifactWriteError";
}

// Plain JavaScript, evaluated: the worker needs no TypeScript loader in any runtime.
const workerSource = `
const { parentPort } = require("node:worker_threads");
const { createHash } = require("node:crypto");
const fs = require("node:fs");
let file;
// Writes go to the thread pool, so hashing the next batch overlaps writing this one.
// One writev at a time per file, of every batch queued meanwhile: concurrent writes to one file
// contend for its inode lock, and the kernel spins on it (measured: most of the system time).
// A short write continues from where it stopped.
function writeAll(f, parts, at, done) {
  fs.writev(f.fd, parts, at, (err, n) => {
    if (err) {
      f.failed ??= err.code || err.message;
      return done();
    }
    let rest = parts;
    let left = n;
    while (rest.length > 0 && left >= rest[0].length) {
      left -= rest[0].length;
      rest = rest.slice(1);
    }
    if (rest.length === 0) return done();
    writeAll(f, [rest[0].subarray(left), ...rest.slice(1)], at + n, done);
  });
}
function pump(f) {
  if (f.writing || f.queue.length === 0) return;
  const parts = f.queue;
  const bytes = f.queued;
  f.queue = [];
  f.queued = 0;
  f.writing = true;
  writeAll(f, parts, f.written, () => {
    f.written += bytes;
    f.writing = false;
    // Written: the memory goes back to the sender for the next reads.
    const buffers = [...new Set(parts.map((p) => p.buffer))];
    parentPort.postMessage({ op: "ack", bytes, buffers }, buffers);
    pump(f);
    settle(f);
  });
}
function settle(f) {
  if (!f.finishing || f.writing || f.queue.length > 0) return;
  if (f.failed !== undefined) parentPort.postMessage({ op: "error", message: f.failed });
  else parentPort.postMessage({ op: "digest", digest: f.hash.digest("hex") });
}
parentPort.on("message", (m) => {
  try {
    if (m.op === "open") {
      const hash = createHash("sha256");
      const buf = Buffer.allocUnsafe(1 << 20);
      for (let at = 0; at < m.have; ) {
        const n = fs.readSync(m.fd, buf, 0, Math.min(buf.length, m.have - at), at);
        if (n === 0) throw new Error("the partial file shrank while it was being read");
        hash.update(buf.subarray(0, n));
        at += n;
      }
      file = { fd: m.fd, written: m.have, hash, failed: undefined, queue: [], queued: 0, writing: false, finishing: false };
      parentPort.postMessage({ op: "opened" });
    } else if (m.op === "chunk") {
      const f = file;
      const parts = m.parts.map((p) => Buffer.from(p.buffer, p.byteOffset, p.byteLength));
      let bytes = 0;
      for (const p of parts) bytes += p.length;
      if (f.failed !== undefined) return parentPort.postMessage({ op: "ack", bytes, buffers: [] });
      for (const p of parts) f.hash.update(p);
      f.queue.push(...parts);
      f.queued += bytes;
      pump(f);
    } else if (m.op === "finish") {
      const f = file;
      file = undefined;
      f.finishing = true;
      settle(f);
    }
  } catch (err) {
    parentPort.postMessage({ op: "error", message: err.code || err.message });
  }
});
`;

export class HashWriter {
  private readonly worker: Worker;
  private backlog = 0;
  private drained: (() => void) | undefined;
  private waiting: { resolve(m: { op: string; digest?: string }): void; reject(e: Error): void } | undefined;
  private dead: ArtifactWriteError | undefined;
  private batch: Uint8Array[] = [];
  private batchBytes = 0;

  constructor() {
    this.worker = new Worker(workerSource, { eval: true });
    this.worker.unref();
    this.worker.on("message", (m: { op: string; bytes?: number; buffers?: ArrayBuffer[]; digest?: string; message?: string }) => {
      if (m.op === "ack") {
        for (const b of m.buffers!) giveBack(b);
        this.backlog -= m.bytes!;
        if (this.backlog <= MAX_BACKLOG_BYTES / 2) this.drained?.();
        return;
      }
      const waiting = this.waiting;
      this.waiting = undefined;
      if (m.op === "error") waiting?.reject(new ArtifactWriteError(`writing the artifact file failed: ${m.message}`));
      else waiting?.resolve(m);
    });
    this.worker.on("error", (err) => this.fail(new ArtifactWriteError(`the hashing worker failed: ${err.message}`)));
    this.worker.on("exit", () => this.fail(new ArtifactWriteError("the hashing worker exited")));
  }

  private fail(err: ArtifactWriteError): void {
    this.dead ??= err;
    this.waiting?.reject(err);
    this.waiting = undefined;
    this.drained?.();
  }

  private request(message: object): Promise<{ op: string; digest?: string }> {
    if (this.dead) return Promise.reject(this.dead);
    return new Promise((resolve, reject) => {
      this.waiting = { resolve, reject };
      this.worker.postMessage(message);
    });
  }

  /** Starts a file: `fd` open for reading and writing, its first `have` bytes already there. */
  async open(fd: number, have: number): Promise<void> {
    this.batch = [];
    this.batchBytes = 0;
    await this.request({ op: "open", fd, have });
  }

  /**
   * Queues a chunk; resolves at once unless too much is queued. The writer takes the chunk over:
   * when it owns its whole memory, that memory moves to the worker and the caller's view empties.
   */
  async push(chunk: Uint8Array): Promise<void> {
    if (this.dead) throw this.dead;
    this.batch.push(chunk);
    this.batchBytes += chunk.byteLength;
    if (this.batchBytes < BATCH_BYTES) return;
    this.send();
    if (this.backlog > MAX_BACKLOG_BYTES) {
      await new Promise<void>((resolve) => (this.drained = resolve));
      this.drained = undefined;
      if (this.dead) throw this.dead;
    }
  }

  private send(): void {
    if (this.batchBytes === 0) return;
    // Pool buffers and chunks owning all their memory move to the worker as they are, uncopied.
    // Anything sharing memory (a slice of Node's pool) is copied into one buffer of its own.
    const owned = this.batch.every(
      (c) => isPoolChunk(c) || (c.byteOffset === 0 && c.byteLength === c.buffer.byteLength && c.buffer instanceof ArrayBuffer),
    );
    const parts = owned ? this.batch : [this.copyBatch()];
    this.backlog += this.batchBytes;
    this.batch = [];
    this.batchBytes = 0;
    this.worker.postMessage(
      { op: "chunk", parts },
      parts.map((p) => p.buffer as ArrayBuffer),
    );
  }

  private copyBatch(): Uint8Array {
    const into = this.batchBytes <= POOL_BUFFER_BYTES ? takeBuffer() : Buffer.allocUnsafeSlow(this.batchBytes);
    let at = 0;
    for (const c of this.batch) {
      into.set(c, at);
      at += c.byteLength;
    }
    return into.subarray(0, at);
  }

  /** Waits until every queued chunk is written, and returns the SHA-256 of the whole file. */
  async finish(): Promise<string> {
    if (!this.dead) this.send();
    return (await this.request({ op: "finish" })).digest!;
  }

  async close(): Promise<void> {
    await this.worker.terminate();
    trimPool();
  }
}
