// Hashing and writing of downloaded bytes on a worker thread, so the thread that receives them
// does nothing else: on a busy two-core machine, SHA-256 and per-chunk write round trips on the
// receiving thread cut acquisition throughput to a third of the source's raw speed.
//
// The worker gets the file's descriptor (descriptors are process-wide), hashes the bytes already
// in the file (a resume), then hashes each chunk it is sent and writes it at the next position
// through the thread pool. Chunks are slots of shared memory (buffer-pool.ts): the mirror client's
// own read buffers, or node:http's chunks copied into one; a slot goes back to the pool once
// written. The sender waits only when more than MAX_BACKLOG_BYTES are queued.
import { Worker } from "node:worker_threads";
import { giveBack, slotOf, takeBuffer, trimPool } from "./buffer-pool.js";

const MAX_BACKLOG_BYTES = 32 * 1024 * 1024;

/** Writing or hashing on the node failed (not the source): never a reason to try another source. */
export class ArtifactWriteError extends Error {
  override readonly name = "ArtifactWriteError";
}

// Plain JavaScript, evaluated: the worker needs no TypeScript loader in any runtime.
const workerSource = `
const { parentPort } = require("node:worker_threads");
const { createHash } = require("node:crypto");
const fs = require("node:fs");
/** Slot number -> a view of its shared memory, sent once per slot. */
const slots = new Map();
let file;
// Writes go to the thread pool, so hashing the next chunk overlaps writing this one.
// One writev at a time per file, of every chunk queued meanwhile: concurrent writes to one file
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
  const used = f.slots;
  const bytes = f.queued;
  f.queue = [];
  f.slots = [];
  f.queued = 0;
  f.writing = true;
  writeAll(f, parts, f.written, () => {
    f.written += bytes;
    f.writing = false;
    // Written: the slots go back to the sender for the next reads.
    parentPort.postMessage({ op: "ack", bytes, slots: used });
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
      file = { fd: m.fd, written: m.have, hash, failed: undefined, queue: [], slots: [], queued: 0, writing: false, finishing: false };
      parentPort.postMessage({ op: "opened" });
    } else if (m.op === "chunk") {
      const f = file;
      if (m.memory !== undefined) slots.set(m.slot, Buffer.from(m.memory));
      if (f.failed !== undefined) return parentPort.postMessage({ op: "ack", bytes: m.length, slots: [m.slot] });
      const part = slots.get(m.slot).subarray(m.offset, m.offset + m.length);
      f.hash.update(part);
      f.queue.push(part);
      f.slots.push(m.slot);
      f.queued += m.length;
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
  /** Slots the worker holds, by number, until it has written them. */
  private readonly inFlight = new Map<number, SharedArrayBuffer>();
  /** Slots whose memory the worker already has. */
  private readonly known = new Set<number>();
  /** A slot being filled with copies of chunks that are not the pool's (node:http's). */
  private copy: Buffer | undefined;
  private copied = 0;

  constructor() {
    this.worker = new Worker(workerSource, { eval: true });
    this.worker.unref();
    this.worker.on("message", (m: { op: string; bytes?: number; slots?: number[]; digest?: string; message?: string }) => {
      if (m.op === "ack") {
        for (const n of m.slots!) {
          giveBack(this.inFlight.get(n)!);
          this.inFlight.delete(n);
        }
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
    this.copy = undefined;
    this.copied = 0;
    await this.request({ op: "open", fd, have });
  }

  /**
   * Queues a chunk; resolves at once unless too much is queued. A chunk in a pool slot is taken
   * over with its slot (the caller must not use it again); any other chunk is copied into one.
   */
  async push(chunk: Uint8Array): Promise<void> {
    if (this.dead) throw this.dead;
    const slot = slotOf(chunk);
    if (slot !== undefined) {
      this.sendCopy();
      this.send(slot, chunk);
    } else this.copyIn(chunk);
    if (this.backlog > MAX_BACKLOG_BYTES) {
      await new Promise<void>((resolve) => (this.drained = resolve));
      this.drained = undefined;
      if (this.dead) throw this.dead;
    }
  }

  private copyIn(chunk: Uint8Array): void {
    for (let at = 0; at < chunk.byteLength; ) {
      this.copy ??= takeBuffer();
      const n = Math.min(chunk.byteLength - at, this.copy.length - this.copied);
      this.copy.set(chunk.subarray(at, at + n), this.copied);
      this.copied += n;
      at += n;
      if (this.copied === this.copy.length) this.sendCopy();
    }
  }

  private sendCopy(): void {
    if (this.copy === undefined) return;
    const filled = this.copy.subarray(0, this.copied);
    this.copy = undefined;
    this.copied = 0;
    if (filled.byteLength > 0) this.send(slotOf(filled)!, filled);
  }

  private send(slot: number, view: Uint8Array): void {
    const memory = view.buffer as SharedArrayBuffer;
    this.inFlight.set(slot, memory);
    this.backlog += view.byteLength;
    // Shared memory: the worker needs it once, after that its number is enough.
    const first = !this.known.has(slot);
    this.known.add(slot);
    this.worker.postMessage({ op: "chunk", slot, offset: view.byteOffset, length: view.byteLength, memory: first ? memory : undefined });
  }

  /** Waits until every queued chunk is written, and returns the SHA-256 of the whole file. */
  async finish(): Promise<string> {
    if (!this.dead) this.sendCopy();
    return (await this.request({ op: "finish" })).digest!;
  }

  async close(): Promise<void> {
    await this.worker.terminate();
    trimPool();
  }
}
