// The OpenAI front door's pure rules: endpoints, what a request asks for, the answer the client
// sees, and the contract's typed errors in OpenAI's shape.
import { describe, expect, it } from "vitest";
import { Code, ConnectError } from "@connectrpc/connect";
import { InvokeApi } from "../gen/proto/modelforge/deployment/v1/deployment_pb.js";
import { openAiFailureOf } from "../server/openai/errors.js";
import { depthWithin, endpointOf, generateRequestOf, maxDepth } from "../server/openai/request.js";
import { streamChunk, unaryAnswer } from "../server/openai/answer.js";

const bytes = (v: unknown) => Buffer.from(typeof v === "string" ? v : JSON.stringify(v));
const nested = (depth: number): unknown => {
  let v: unknown = 1;
  for (let i = 0; i < depth; i++) v = { a: v };
  return v;
};

describe("endpointOf", () => {
  it.each([
    ["GET", "/v1/models", { kind: "models" }],
    ["GET", "/v1/models/", { kind: "models" }],
    ["POST", "/v1/chat/completions", { kind: "generate", api: InvokeApi.CHAT_COMPLETIONS }],
    ["POST", "/v1/completions", { kind: "generate", api: InvokeApi.COMPLETIONS }],
    ["POST", "/v1/embeddings", { kind: "embeddings" }],
  ])("%s %s", (method, path, endpoint) => {
    expect(endpointOf(method, path)).toEqual(endpoint);
  });

  it.each([
    ["GET", "/v1/nothing", 404, "unknown_url"],
    ["POST", "/v1/models", 405, "method_not_allowed"],
    ["GET", "/v1/chat/completions", 405, "method_not_allowed"],
  ])("%s %s is %i %s", (method, path, status, code) => {
    expect(endpointOf(method, path)).toMatchObject({ status, body: { error: { code } } });
  });
});

describe("generateRequestOf", () => {
  it("drops the runtime's model, and always asks a stream's runtime for usage", () => {
    const r = generateRequestOf(bytes({ model: "tiny", prompt: "hi", stream: true }));
    expect(r).toMatchObject({ model: "tiny", stream: true, includeUsage: false });
    expect(JSON.parse(Buffer.from((r as { payload: Uint8Array }).payload).toString())).toEqual({
      prompt: "hi",
      stream_options: { include_usage: true },
    });
    expect(generateRequestOf(bytes({ model: "tiny", stream: true, stream_options: { include_usage: true } }))).toMatchObject({
      includeUsage: true,
    });
  });

  it.each([
    ["not JSON", "{", null],
    ["an array", [], null],
    ["no model", { prompt: "x" }, "model"],
    ["a model that is no deployment name", { model: "../etc" }, "model"],
    ["a stream that is not a boolean", { model: "tiny", stream: "yes" }, "stream"],
    ["stream options that are not an object", { model: "tiny", stream_options: 3 }, "stream_options"],
    ["include_usage that is not a boolean", { model: "tiny", stream_options: { include_usage: 1 } }, "stream_options"],
    ["nesting past the bound", { model: "tiny", x: nested(maxDepth) }, null],
  ])("refuses %s with 400", (_what, body, param) => {
    expect(generateRequestOf(bytes(body))).toMatchObject({ status: 400, body: { error: { type: "invalid_request_error", param } } });
  });

  it("counts depth without recursion, however deep", () => {
    expect(depthWithin(nested(200_000), maxDepth)).toBe(false);
    expect(depthWithin(nested(maxDepth), maxDepth)).toBe(true);
    expect(depthWithin(nested(maxDepth + 1), maxDepth)).toBe(false);
  });
});

describe("answers", () => {
  it("names a whole answer by the deployment and reads its usage", () => {
    const a = unaryAnswer(bytes({ model: "runtime-uuid", usage: { prompt_tokens: 3, completion_tokens: 5 } }), "tiny");
    expect(JSON.parse(a!.body).model).toBe("tiny");
    expect(a!.usage).toEqual({ promptTokens: 3, completionTokens: 5 });
    expect(unaryAnswer(bytes("[]"), "tiny")).toBeUndefined();
  });

  it.each([
    [false, { choices: [{ text: "a" }], usage: null }, { choices: [{ text: "a" }], model: "tiny" }],
    [false, { choices: [], usage: { prompt_tokens: 1, completion_tokens: 2 } }, undefined],
    [
      true,
      { choices: [], usage: { prompt_tokens: 1, completion_tokens: 2 } },
      { choices: [], usage: { prompt_tokens: 1, completion_tokens: 2 }, model: "tiny" },
    ],
  ])("a stream chunk when usage is asked: %s", (includeUsage, chunk, seen) => {
    const c = streamChunk(bytes({ ...chunk, model: "runtime-uuid" }), "tiny", includeUsage);
    expect(c!.data === undefined ? undefined : JSON.parse(c!.data)).toEqual(seen);
  });
});

describe("openAiFailureOf", () => {
  it.each([
    [Code.InvalidArgument, 400, "invalid_request_error", undefined],
    [Code.Unauthenticated, 401, "invalid_request_error", undefined],
    [Code.PermissionDenied, 403, "permission_error", undefined],
    [Code.NotFound, 404, "invalid_request_error", undefined],
    [Code.ResourceExhausted, 429, "rate_limit_error", 1],
    [Code.Unavailable, 503, "service_unavailable", 1],
    [Code.FailedPrecondition, 503, "service_unavailable", 1],
    [Code.DeadlineExceeded, 504, "timeout", undefined],
    [Code.Internal, 500, "server_error", undefined],
  ])("code %i is %i %s", (code, status, type, retryAfter) => {
    const f = openAiFailureOf(new ConnectError("why\u0000 it failed", code));
    expect(f).toMatchObject({ status, body: { error: { type } } });
    expect(f.retryAfter).toBe(retryAfter);
  });

  it("hides our own faults' text, and bounds and cleans a message", () => {
    expect(openAiFailureOf(new Error("secret detail")).body.error.message).toBe("internal error");
    const long = openAiFailureOf(new ConnectError(`a\u0007b${"x".repeat(2000)}`, Code.InvalidArgument)).body.error.message;
    expect(long.length).toBeLessThanOrEqual(512);
    expect(long.startsWith("a b")).toBe(true);
  });
});
