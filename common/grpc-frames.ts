// gRPC's length-prefixed messages ([0][uint32 length][message]) on an HTTP/2 stream, for the
// Session framed by hand on both sides (server/sessions/session-grpc.ts, agent/session/grpc-session.ts).
import { Code, ConnectError } from "@connectrpc/connect";

/** Splits gRPC length-prefixed messages out of the byte stream. */
export class FrameReader {
  /** Received and not yet returned; joined only once a whole message is in. */
  private chunks: Buffer[] = [];
  private buffered = 0;
  /** `path`: the method, named in the refusal of a message over `maxMessageBytes`. */
  constructor(
    private readonly path: string,
    private readonly maxMessageBytes: number,
  ) {}
  /** Returns the complete messages in `chunk` (with what was left over before). */
  push(chunk: Buffer): Buffer[] {
    this.chunks.push(chunk);
    this.buffered += chunk.length;
    const out: Buffer[] = [];
    while (this.buffered >= 5) {
      if (this.chunks[0]!.length < 5) this.chunks = [Buffer.concat(this.chunks)];
      const head = this.chunks[0]!;
      if (head[0] !== 0) throw new ConnectError("compressed messages are not supported", Code.Unimplemented);
      const length = head.readUInt32BE(1);
      // Refused on its declared length, before any of it is held.
      if (length > this.maxMessageBytes) {
        throw new ConnectError(
          `message of ${length} bytes is over the limit of ${this.maxMessageBytes} bytes for ${this.path}`,
          Code.ResourceExhausted,
        );
      }
      if (this.buffered < 5 + length) break;
      const joined = this.chunks.length === 1 ? head : Buffer.concat(this.chunks);
      out.push(joined.subarray(5, 5 + length));
      const rest = joined.subarray(5 + length);
      this.chunks = rest.length > 0 ? [rest] : [];
      this.buffered = rest.length;
    }
    return out;
  }
  get empty(): boolean {
    return this.buffered === 0;
  }
  /** Bytes still to come of the message begun: 0 between messages (or with only part of its prefix in). */
  get unfinished(): number {
    if (this.buffered < 5) return 0;
    const head = this.chunks.length === 1 ? this.chunks[0]! : Buffer.concat(this.chunks);
    return Math.max(0, 5 + head.readUInt32BE(1) - this.buffered);
  }
}

export function frame(message: Uint8Array): Buffer {
  const out = Buffer.allocUnsafe(5 + message.length);
  out[0] = 0;
  out.writeUInt32BE(message.length, 1);
  out.set(message, 5);
  return out;
}
