// Which answers the control plane compresses for a client that accepts gzip (as the agent and
// every Connect client do by default): small ones go as they are, large ones are gzipped. Read off
// the wire, because gRPC names the encoding in the headers while each message says in its own
// envelope whether it is compressed.
import type http2 from "node:http2";
import { gunzipSync } from "node:zlib";
import { afterAll, beforeAll, expect, it } from "vitest";
import { create, fromBinary, toBinary } from "@bufbuild/protobuf";
import { RegisterNodeRequestSchema, RegisterNodeResponseSchema } from "../../gen/proto/modelforge/admin/v1/admin_pb.js";
import { frame } from "../../common/grpc-frames.js";
import { connect } from "../support/raw-call.js";
import { startTestServer, testAdminKey, type TestServer } from "../support/server.js";

let ts: TestServer;
let session: http2.ClientHttp2Session;
beforeAll(async () => {
  ts = await startTestServer();
  session = await connect(ts.url, ts.caPem);
});
afterAll(async () => {
  session.close();
  await ts.stop();
});

/** Registers a node with `count` labels of 250-byte values; returns the answer's envelope flag. */
async function register(name: string, count: number): Promise<{ compressed: boolean; bytes: number }> {
  const labels = Object.fromEntries(Array.from({ length: count }, (_, i) => [`k${i}`, "v".repeat(250)]));
  const message = toBinary(RegisterNodeRequestSchema, create(RegisterNodeRequestSchema, { name, labels }));
  const req = session.request({
    ":method": "POST",
    ":path": "/modelforge.admin.v1.AdminService/RegisterNode",
    "content-type": "application/grpc",
    te: "trailers",
    "grpc-accept-encoding": "gzip",
    "x-modelforge-admin-token": testAdminKey,
  });
  req.end(frame(message));
  const chunks: Buffer[] = [];
  for await (const chunk of req) chunks.push(chunk as Buffer);
  const body = Buffer.concat(chunks);
  expect(body.length).toBeGreaterThan(5);
  const compressed = body[0] === 1;
  const payload = body.subarray(5, 5 + body.readUInt32BE(1));
  const answer = fromBinary(RegisterNodeResponseSchema, compressed ? gunzipSync(payload) : payload);
  expect(Object.keys(answer.node?.labels ?? {})).toHaveLength(count);
  return { compressed, bytes: payload.length };
}

it("sends an answer of a few KiB uncompressed though the client accepts gzip", async () => {
  const small = await register("compress-small", 16);
  expect(small.bytes).toBeGreaterThan(4000);
  expect(small.compressed).toBe(false);
});

it("gzips an answer over 16 KiB", async () => {
  const large = await register("compress-large", 64);
  expect(large.compressed).toBe(true);
  expect(large.bytes).toBeLessThan(4000);
});
