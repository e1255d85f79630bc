// Reusable 1 MiB buffers for downloaded bytes: the mirror client reads the socket straight into
// them, the hashing worker hands each one back once it is written. Allocating (and faulting in)
// fresh memory for every read, and collecting it again, cost more CPU than hashing the bytes.
export const POOL_BUFFER_BYTES = 1024 * 1024;
/** Enough for the hashing worker's backlog plus what is in flight; trimmed when a job ends. */
const MAX_FREE = 48;

const free: ArrayBuffer[] = [];
/** Buffers of this pool: only these may be handed to the worker while shorter than their memory. */
const ours = new WeakSet<ArrayBufferLike>();

export function takeBuffer(): Buffer {
  const reused = free.pop();
  if (reused !== undefined) return Buffer.from(reused);
  // Its own memory, not a slice of Node's shared pool: it can move to the worker whole.
  const fresh = Buffer.allocUnsafeSlow(POOL_BUFFER_BYTES);
  ours.add(fresh.buffer);
  return fresh;
}

/** Takes back a buffer of the pool's size (others are left to the garbage collector). */
export function giveBack(buffer: ArrayBuffer): void {
  if (buffer.byteLength !== POOL_BUFFER_BYTES || free.length >= MAX_FREE) return;
  ours.add(buffer);
  free.push(buffer);
}

/** Whether `chunk` is the start of a pool buffer whose rest nothing else refers to. */
export function isPoolChunk(chunk: Uint8Array): boolean {
  return chunk.byteOffset === 0 && ours.has(chunk.buffer);
}

/** Frees idle buffers once no download needs them. */
export function trimPool(): void {
  free.length = 0;
}
