// Protobuf's wire primitives for the Session's hand-written fast paths
// (server/sessions/heartbeat-wire.ts and invoke-wire.ts, agent/deployments/invoke-answer.ts): each
// reads or writes the very bytes protobuf-es does for the one shape it knows, and leaves every
// other shape to protobuf-es.

/** A read position in a message, moved on by readVarint. */
export interface Cursor {
  at: number;
}

/**
 * The varint at `cursor.at`, of at most 7 bytes (below 2^49, exact in a double), moving the cursor
 * past it; -1 for a longer one (never a value the fast paths read) or one cut short. It allocates
 * nothing: it runs for each field of every relayed chunk.
 */
export function readVarint(bytes: Uint8Array, cursor: Cursor, end: number): number {
  let value = 0;
  let scale = 1;
  let at = cursor.at;
  for (let i = 0; i < 7 && at < end; i++) {
    const b = bytes[at++]!;
    value += (b & 0x7f) * scale;
    if (b < 0x80) {
      cursor.at = at;
      return value;
    }
    scale *= 128;
  }
  return -1;
}

/** The varint at `at` as [value, next offset], or undefined (see readVarint). */
export function varint(bytes: Uint8Array, at: number, end: number): [number, number] | undefined {
  const cursor = { at };
  const value = readVarint(bytes, cursor, end);
  return value < 0 ? undefined : [value, cursor.at];
}

export function pushVarint(out: number[], value: number | bigint): void {
  if (typeof value === "bigint") {
    // Only a message id beyond 2^53 (the agent's choice) needs BigInt arithmetic.
    if (value > BigInt(Number.MAX_SAFE_INTEGER)) {
      let v = value;
      while (v >= 0x80n) {
        out.push(Number(v & 0x7fn) | 0x80);
        v >>= 7n;
      }
      out.push(Number(v));
      return;
    }
    value = Number(value);
  }
  while (value >= 0x80) {
    out.push((value % 0x80) | 0x80);
    value = Math.floor(value / 0x80);
  }
  out.push(value);
}

/** A varint field. */
export function pushField(out: number[], fieldTag: number, value: number | bigint): void {
  out.push(fieldTag);
  pushVarint(out, value);
}

/** A string field, left out when empty (as protobuf-es writes it). */
export function pushString(out: number[], fieldTag: number, value: string): void {
  if (value === "") return;
  const bytes = Buffer.from(value, "utf8");
  out.push(fieldTag);
  pushVarint(out, bytes.length);
  for (const b of bytes) out.push(b);
}

/** Whether every byte at [from, to) is printable ASCII (0x20-0x7e): the only text the fast paths read. */
export function isPrintableAscii(bytes: Uint8Array, from: number, to: number): boolean {
  for (let i = from; i < to; i++) if (bytes[i]! < 0x20 || bytes[i]! > 0x7e) return false;
  return true;
}

/** The bytes at [from, to) as text when they are printable ASCII; else undefined. */
export function printableAscii(bytes: Uint8Array, from: number, to: number): string | undefined {
  return isPrintableAscii(bytes, from, to) ? String.fromCharCode(...bytes.subarray(from, to)) : undefined;
}

/** A length-delimited field whose body is `body`. */
export function pushMessage(out: number[], fieldTag: number, body: number[]): void {
  out.push(fieldTag);
  pushVarint(out, body.length);
  for (const b of body) out.push(b);
}
