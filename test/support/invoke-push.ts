// InvokeStarts as the relay pushes them, for the tests that hold the server's writer and the
// agent's reader to protobuf-es (test/unit/invoke-wire.test.ts, agent-invoke-start.test.ts).
import { InvokeApi } from "../../gen/proto/modelforge/deployment/v1/deployment_pb.js";
import type { InvokePush } from "../../server/node-sessions.js";

const request = Buffer.from('{"prompt":"The quick brown fox","max_tokens":8,"stream":true}');

export const invokePush: InvokePush = {
  invokeId: 1n,
  deploymentId: "0b7c6f1e-4a2d-4c55-9a8e-3f1d2c3b4a59",
  requestId: "7f3e2d1c-0b9a-4877-8665-5443322110ff",
  contentType: "application/json",
  payload: request,
  timeoutMs: 30_000,
  revision: 3n,
  replica: 1,
  api: InvokeApi.CHAT_COMPLETIONS,
  stream: true,
};

/** What each case changes of invokePush: the fields' edges, empty, large and beyond ASCII. */
export const invokePushCases: [string, Partial<InvokePush>][] = [
  ["a stream", {}],
  ["a unary call", { stream: false, api: InvokeApi.COMPLETIONS }],
  ["embeddings", { stream: false, api: InvokeApi.EMBEDDINGS }],
  ["no api", { api: InvokeApi.UNSPECIFIED }],
  ["replica 0 (present, as a wrapper)", { replica: 0 }],
  ["a large replica number", { replica: 70_000 }],
  ["revision 0", { revision: 0n }],
  ["a large revision", { revision: 2n ** 40n + 5n }],
  ["invoke id 0", { invokeId: 0n }],
  ["an invoke id past 2^53", { invokeId: 2n ** 60n + 3n }],
  ["a 1 ms timeout", { timeoutMs: 1 }],
  ["a timeout of whole seconds", { timeoutMs: 1_000 }],
  ["a timeout with both parts", { timeoutMs: 1_001 }],
  ["a long timeout", { timeoutMs: 2 ** 31 }],
  ["an empty payload", { payload: new Uint8Array(0) }],
  ["a payload of 70,000 bytes", { payload: Buffer.alloc(70_000, 0x7b) }],
  ["a payload at the contract's bound", { payload: Buffer.alloc(4 * 1024 * 1024, 0x20) }],
  ["a request id beyond ASCII", { requestId: "réquête-✓" }],
  ["an empty request id and content type", { requestId: "", contentType: "" }],
];
