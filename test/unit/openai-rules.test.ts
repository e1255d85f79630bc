// The OpenAI front door's pure rules: endpoints, what a request asks for, the answer the client
// sees, and the contract's typed errors in OpenAI's shape.
import { describe, expect, it } from "vitest";
import { Code, ConnectError } from "@connectrpc/connect";
import { InvokeApi } from "../../gen/proto/modelforge/deployment/v1/deployment_pb.js";
import { openAiFailureOf } from "../../server/openai/errors.js";
import { endpointOf, generateRequestOf } from "../../server/openai/request.js";
import { renamed } from "../../server/openai/answer.js";
import { callerWantsUsage, payloadForNode } from "../../server/invoke/rules.js";
import { maxJsonDepth as maxDepth } from "../../server/invoke/json-body.js";
import { emptyTally, tallyPiece, tokensOf } from "../../server/usage/tally.js";

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
    ["POST", "/v1/embeddings", { kind: "generate", api: InvokeApi.EMBEDDINGS }],
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
  it("drops the runtime's model; a stream always asks its runtime for usage, and the caller's wish is kept", () => {
    const r = generateRequestOf(bytes({ model: "tiny", prompt: "hi", stream: true }));
    expect(r).toMatchObject({ model: "tiny", stream: true });
    const body = JSON.parse(Buffer.from((r as { payload: Uint8Array }).payload).toString());
    expect(body).toEqual({ prompt: "hi" });
    const forNode = JSON.parse(Buffer.from(payloadForNode(body, Buffer.from("{}"), true)).toString());
    expect(forNode.stream_options).toEqual({ include_usage: true, continuous_usage_stats: true });
    expect(callerWantsUsage(body)).toEqual({ last: false, every: false });
    expect(callerWantsUsage({ stream_options: { include_usage: true } })).toEqual({ last: true, every: false });
    expect(callerWantsUsage({ stream_options: { include_usage: true, continuous_usage_stats: true } })).toEqual({
      last: true,
      every: true,
    });
    const unary = Buffer.from('{"prompt":"hi"}');
    expect(payloadForNode(body, unary, false)).toBe(unary);
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
});

describe("answers and their usage", () => {
  it("names an answer by the deployment", () => {
    expect(JSON.parse(renamed({ payload: bytes({ model: "runtime-uuid", id: "x" }) }, "tiny")!)).toEqual({ model: "tiny", id: "x" });
    expect(renamed({ payload: bytes("[]") }, "tiny")).toBeUndefined();
  });

  it("names an answer the relay already read from that object, without reading its bytes again", () => {
    const answer = { model: "runtime-uuid", id: "x" };
    expect(JSON.parse(renamed({ payload: bytes("not read"), answer }, "tiny")!)).toEqual({ model: "tiny", id: "x" });
  });

  it("reads a whole answer's usage", () => {
    const t = emptyTally();
    const passed = tallyPiece(t, bytes({ usage: { prompt_tokens: 3, completion_tokens: 5 } }), false, none);
    expect(passed?.token).toBe(false);
    expect(tokensOf(t)).toEqual({ promptTokens: 3, cachedPromptTokens: 0, completionTokens: 5 });
  });

  it.each([
    ["reused tokens", { cached_tokens: 2 }, 2],
    ["more than the prompt: capped at it", { cached_tokens: 9 }, 3],
    ["not a count", { cached_tokens: -1 }, 0],
    ["no details", undefined, 0],
    ["details not an object", "x", 0],
  ])("reads the cached prompt tokens: %s", (_what, details, cached) => {
    const t = emptyTally();
    tallyPiece(t, bytes({ usage: { prompt_tokens: 3, completion_tokens: 5, prompt_tokens_details: details } }), false, none);
    expect(tokensOf(t)).toEqual({ promptTokens: 3, cachedPromptTokens: cached, completionTokens: 5 });
  });

  const none = { last: false, every: false };
  const last = { last: true, every: false };
  const every = { last: true, every: true };
  const tokenWithUsage = { choices: [{ text: "a", finish_reason: null }], usage: { prompt_tokens: 1, completion_tokens: 1 } };
  const usageOnly = { choices: [], usage: { prompt_tokens: 1, completion_tokens: 2 } };
  it.each([
    ["a completion token", { choices: [{ text: "a", finish_reason: null }] }, none, "as is", 1],
    ["a chat token", { choices: [{ delta: { content: "a" }, finish_reason: null }] }, none, "as is", 1],
    ["the chat's opening role chunk", { choices: [{ delta: { role: "assistant", content: "" }, finish_reason: null }] }, none, "as is", 0],
    ["the finish chunk", { choices: [{ text: "", finish_reason: "length" }] }, none, "as is", 0],
    ["a token's running usage, not asked for", tokenWithUsage, none, "stripped", 1],
    ["a token's running usage, the last asked for", tokenWithUsage, last, "stripped", 1],
    ["a token's running usage, every one asked for", tokenWithUsage, every, "as is", 1],
    ["the last usage, not asked for", usageOnly, none, "dropped", 0],
    ["the last usage, asked for", usageOnly, last, "as is", 0],
  ])("a stream chunk: %s", (_what, chunk, wants, seen, tokens) => {
    const t = emptyTally();
    const passed = tallyPiece(t, bytes(chunk), true, wants);
    const shown =
      passed === undefined
        ? "dropped"
        : JSON.parse(Buffer.from(passed.payload).toString()).usage === undefined && "usage" in chunk
          ? "stripped"
          : "as is";
    expect(shown).toBe(seen);
    expect(t.delivered).toBe(tokens);
    // The object the OpenAI API names is the one a gRPC caller gets as bytes.
    if (passed !== undefined) expect(passed.answer).toEqual(JSON.parse(Buffer.from(passed.payload).toString()));
  });

  it("counts a stream by the runtime's running usage: a stream cut short to its last delivered chunk", () => {
    const t = emptyTally();
    for (let i = 1; i <= 4; i++) {
      tallyPiece(
        t,
        bytes({ choices: [{ text: "ab", finish_reason: null }], usage: { prompt_tokens: 7, completion_tokens: 2 * i } }),
        true,
        none,
      );
    }
    expect(tokensOf(t)).toEqual({ promptTokens: 7, cachedPromptTokens: 0, completionTokens: 8 });
  });

  it("counts a stream without running usage by its token chunks, until its usage comes", () => {
    const t = emptyTally();
    for (let i = 0; i < 4; i++) tallyPiece(t, bytes({ choices: [{ text: "a", finish_reason: null }] }), true, none);
    expect(tokensOf(t)).toEqual({ promptTokens: 0, cachedPromptTokens: 0, completionTokens: 4 });
    tallyPiece(t, bytes(usageOnly), true, none);
    expect(tokensOf(t)).toEqual({ promptTokens: 1, cachedPromptTokens: 0, completionTokens: 2 });
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
