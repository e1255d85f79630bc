// Reusable 1 MiB slots of shared memory for downloaded bytes: the mirror client reads the socket
// straight into them, and the hashing worker hashes and writes them where they are; only a slot
// number crosses between the threads, and the slot comes back once written. Allocating (and
// faulting in) fresh memory for every read, moving it and collecting it again cost more CPU than
// hashing the bytes.
export const SLOT_BYTES = 1024 * 1024;
/** Enough for the hashing worker's backlog plus what is in flight; trimmed when a job ends. */
const MAX_FREE = 48;

const free: SharedArrayBuffer[] = [];
/** Each slot's number, for the worker; a slot nobody gives back is simply collected. */
const numbers = new WeakMap<ArrayBufferLike, number>();
let nextNumber = 0;

export function takeBuffer(): Buffer {
  let memory = free.pop();
  if (memory === undefined) {
    memory = new SharedArrayBuffer(SLOT_BYTES);
    numbers.set(memory, nextNumber++);
  }
  return Buffer.from(memory);
}

/**
 * The slot number when `chunk` lies in a slot of this pool. Whoever holds such a chunk owns the
 * whole slot: the mirror client never touches a slot again once it has handed it on.
 */
export function slotOf(chunk: Uint8Array): number | undefined {
  return numbers.get(chunk.buffer);
}

/** Takes a slot back for the next reads. */
export function giveBack(memory: SharedArrayBuffer): void {
  if (free.length < MAX_FREE) free.push(memory);
}

/** Frees idle slots once no download needs them. */
export function trimPool(): void {
  free.length = 0;
}
