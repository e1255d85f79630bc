// gRPC message framing for the Session fast path.
import { describe, expect, it } from "vitest";
import { Code, ConnectError } from "@connectrpc/connect";
import { FrameReader, frame } from "../../common/grpc-frames.js";

describe("FrameReader", () => {
  it("reassembles messages split across chunks and several in one chunk", () => {
    const a = frame(Buffer.from("hello"));
    const b = frame(Buffer.from(""));
    const c = frame(Buffer.alloc(300, 7));
    const all = Buffer.concat([a, b, c]);
    const reader = new FrameReader("/test", 4 * 1024 * 1024);
    const out: Buffer[] = [];
    for (let i = 0; i < all.length; i += 3) out.push(...reader.push(all.subarray(i, i + 3)));
    expect(out.map((m) => m.length)).toEqual([5, 0, 300]);
    expect(out[0]!.toString()).toBe("hello");
    expect(reader.empty).toBe(true);
    expect(new FrameReader("/test", 4 * 1024 * 1024).push(Buffer.concat([a, c]))).toHaveLength(2);
  });

  it("keeps a partial message for later and reports it as not empty", () => {
    const reader = new FrameReader("/test", 4 * 1024 * 1024);
    expect(reader.push(frame(Buffer.from("abc")).subarray(0, 6))).toEqual([]);
    expect(reader.empty).toBe(false);
  });

  it("refuses compressed and oversized messages", () => {
    const compressed = frame(Buffer.from("x"));
    compressed[0] = 1;
    expect(() => new FrameReader("/test", 4 * 1024 * 1024).push(compressed)).toThrow(ConnectError);
    const huge = Buffer.alloc(5);
    huge.writeUInt32BE(64 * 1024 * 1024, 1);
    try {
      new FrameReader("/test", 4 * 1024 * 1024).push(huge);
      expect.unreachable();
    } catch (err) {
      expect((err as ConnectError).code).toBe(Code.ResourceExhausted);
    }
  });
});
