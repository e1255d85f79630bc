// The Session's heartbeat fast path (server/sessions/heartbeat-wire.ts) against protobuf-es and the
// edge check: it reads an id only from bytes the general path would decode to the same plain
// heartbeat and pass, and writes the very bytes protobuf-es writes.
import { describe, expect, it } from "vitest";
import { create, fromBinary, toBinary } from "@bufbuild/protobuf";
import { timestampFromMs } from "@bufbuild/protobuf/wkt";
import {
  HeartbeatResponseSchema,
  ReplySchema,
  SessionRequestSchema,
  SessionResponseSchema,
  type SessionRequest,
} from "../../gen/proto/modelforge/agent/v1/agent_pb.js";
import { emptyReplyBytes, heartbeatReplyBytes, plainHeartbeatId } from "../../server/sessions/heartbeat-wire.js";
import { sessionMessageViolation } from "../../server/edge/validate.js";
import { mulberry32 } from "../../common/random.js";
import { mutated } from "../support/mutate.js";

const ids = [0n, 1n, 127n, 128n, 300n, 16_383n, 16_384n, 2n ** 32n, 2n ** 49n - 1n];

function heartbeat(messageId: bigint, agentVersion: string, sentAtMs: number | undefined): SessionRequest {
  return create(SessionRequestSchema, {
    messageId,
    message: { case: "heartbeat", value: { agentVersion, ...(sentAtMs === undefined ? {} : { sentAt: timestampFromMs(sentAtMs) }) } },
  });
}

/** The general path: decoded by protobuf-es and passed by the edge check, as a plain heartbeat. */
function generalId(bytes: Uint8Array): bigint | undefined {
  let m: SessionRequest;
  try {
    m = fromBinary(SessionRequestSchema, bytes, { readUnknownFields: false });
  } catch {
    return undefined;
  }
  if (m.message.case !== "heartbeat" || m.message.value.capabilities.length > 0 || m.message.value.replicaLoads.length > 0)
    return undefined;
  return sessionMessageViolation(SessionRequestSchema, m) === undefined ? m.messageId : undefined;
}

describe("reading a heartbeat off the wire", () => {
  it("reads the id of every plain heartbeat an agent sends", () => {
    const next = mulberry32(1);
    for (const id of ids) {
      for (const version of ["", "0.9.0", "1.2.3-rc.1+build.7", "v".repeat(64)]) {
        for (const sentAt of [undefined, 0, 1_000, 1_764_564_000_123, 253_402_300_799_999, Math.floor(next() * 2e12)]) {
          const bytes = toBinary(SessionRequestSchema, heartbeat(id, version, sentAt));
          expect(plainHeartbeatId(bytes), `${id} ${version} ${sentAt}`).toBe(id);
        }
      }
    }
  });

  it.each<[string, SessionRequest]>([
    ["an agent version over 64 bytes", heartbeat(1n, "v".repeat(65), 0)],
    ["a control character in the version", heartbeat(1n, "1.0\u0007", 0)],
    ["a version beyond ASCII (valid, but checked the general way)", heartbeat(1n, "1.0-é", 0)],
    [
      "a timestamp past the year 9999",
      create(SessionRequestSchema, { messageId: 1n, message: { case: "heartbeat", value: { sentAt: { seconds: 253_402_300_800n } } } }),
    ],
    [
      "a negative timestamp",
      create(SessionRequestSchema, { messageId: 1n, message: { case: "heartbeat", value: { sentAt: { seconds: -1n } } } }),
    ],
    [
      "nanos past a second",
      create(SessionRequestSchema, { messageId: 1n, message: { case: "heartbeat", value: { sentAt: { nanos: 1_000_000_000 } } } }),
    ],
    [
      "capabilities",
      create(SessionRequestSchema, { messageId: 1n, message: { case: "heartbeat", value: { capabilities: ["artifact.acquire.v1"] } } }),
    ],
    [
      "replica loads (routing reads them; a plain heartbeat clears them)",
      create(SessionRequestSchema, {
        messageId: 1n,
        message: { case: "heartbeat", value: { replicaLoads: [{ deploymentId: "d", revision: 1n, replica: 1, inFlight: 2, queued: 1 }] } },
      }),
    ],
    ["a message id beyond 2^49", heartbeat(2n ** 49n, "1.0", 0)],
    ["a message id beyond what is stored", heartbeat(2n ** 63n, "1.0", 0)],
    ["another message", create(SessionRequestSchema, { messageId: 1n, message: { case: "hello", value: { agentVersion: "1.0" } } })],
    ["no message", create(SessionRequestSchema, { messageId: 1n })],
  ])("leaves %s to the general path", (_, message) => {
    expect(plainHeartbeatId(toBinary(SessionRequestSchema, message))).toBeUndefined();
  });

  it("leaves duplicated, unknown and cut-short fields to the general path", () => {
    const plain = toBinary(SessionRequestSchema, heartbeat(5n, "1.0", 1_000));
    expect(plainHeartbeatId(plain)).toBe(5n);
    expect(plainHeartbeatId(Uint8Array.from([...plain, 0x08, 0x06]))).toBeUndefined(); // message_id twice
    expect(plainHeartbeatId(Uint8Array.from([...plain, 0x20, 0x01]))).toBeUndefined(); // unknown field 4
    expect(plainHeartbeatId(plain.subarray(0, plain.length - 1))).toBeUndefined();
    expect(plainHeartbeatId(new Uint8Array(0))).toBeUndefined();
  });

  it("never reads an id from bytes the general path would not take as that plain heartbeat", () => {
    const next = mulberry32(7);
    let read = 0;
    for (let i = 0; i < 20_000; i++) {
      const id = ids[Math.floor(next() * ids.length)]!;
      const bytes = toBinary(SessionRequestSchema, heartbeat(id, "1.2.3", Math.floor(next() * 2e12)));
      const input = mutated(bytes, next);
      const fast = plainHeartbeatId(input);
      if (fast === undefined) continue;
      read++;
      expect(generalId(input), `bytes ${Buffer.from(input).toString("hex")}`).toBe(fast);
    }
    // The mutations leave some heartbeats plain (an id or a timestamp digit changed).
    expect(read).toBeGreaterThan(1_000);
  });
});

describe("writing a heartbeat's reply", () => {
  it("writes what protobuf-es writes", () => {
    const next = mulberry32(3);
    const times = [0, 999, 1_000, 1_764_564_000_000, 1_764_564_000_123, ...Array.from({ length: 50 }, () => Math.floor(next() * 4e12))];
    for (const id of [...ids, 2n ** 53n + 1n, 2n ** 63n - 1n]) {
      for (const ms of times) {
        const expected = toBinary(
          SessionResponseSchema,
          create(SessionResponseSchema, {
            message: {
              case: "reply",
              value: create(ReplySchema, {
                messageId: id,
                result: { case: "heartbeat", value: create(HeartbeatResponseSchema, { serverTime: timestampFromMs(ms) }) },
              }),
            },
          }),
        );
        expect(Buffer.from(heartbeatReplyBytes(id, ms)).toString("hex"), `${id} ${ms}`).toBe(Buffer.from(expected).toString("hex"));
      }
    }
  });
});

describe("writing a relayed message's acknowledgement", () => {
  it("writes what protobuf-es writes for a reply without a result", () => {
    for (const id of [...ids, 2n ** 53n + 1n, 2n ** 64n - 1n]) {
      const expected = toBinary(
        SessionResponseSchema,
        create(SessionResponseSchema, { message: { case: "reply", value: create(ReplySchema, { messageId: id }) } }),
      );
      expect(Buffer.from(emptyReplyBytes(id)).toString("hex"), `${id}`).toBe(Buffer.from(expected).toString("hex"));
    }
  });
});
