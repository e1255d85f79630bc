// The invoke payload's rules, pure and table-driven: JSON shape (UTF-8, depth, surrogates), every
// OpenAI chat, completion and embeddings field with good and hostile values, `model` dropped, the API inferred
// or named, and a caller's timeout under 1 ms refused.
import { describe, expect, it } from "vitest";
import { Code, type ConnectError } from "@connectrpc/connect";
import { InvokeApi } from "../../gen/proto/modelforge/deployment/v1/deployment_pb.js";
import { maxJsonDepth, parseJsonObject, RequestError } from "../../server/invoke/json-body.js";
import { checkedRequest, type RequestKind } from "../../server/invoke/openai-request.js";
import { callerWaitMs, checkEmbeddings, checkPayload, requestedTimeoutMs } from "../../server/invoke/rules.js";

const bytes = (s: string) => Buffer.from(s);
const nested = (depth: number) => `{"a":${"[".repeat(depth - 1)}${"]".repeat(depth - 1)}}`;

/** The RequestError's param, or "ok". */
function verdict(f: () => unknown): string {
  try {
    f();
    return "ok";
  } catch (err) {
    if (err instanceof RequestError) return err.param;
    throw err;
  }
}

describe("a JSON body", () => {
  it.each([
    ["an object", '{"prompt":"x"}', "ok"],
    ["invalid UTF-8", Buffer.from([0x7b, 0xff, 0x7d]), "body"],
    ["not JSON", "{", "body"],
    ["an array", "[1]", "body"],
    ["null", "null", "body"],
    ["a string", '"x"', "body"],
    [`nested ${maxJsonDepth} deep`, nested(maxJsonDepth), "ok"],
    [`nested ${maxJsonDepth + 1} deep`, nested(maxJsonDepth + 1), "body"],
    ["nested 50,000 deep", nested(50_000), "body"],
    ["an unpaired surrogate in a value", '{"prompt":"a\\ud800b"}', "body"],
    ["an unpaired surrogate in a key", '{"\\udc00":1}', "body"],
    ["a surrogate pair", '{"prompt":"\\ud83d\\ude00"}', "ok"],
    ["NUL and emoji", '{"prompt":"a\\u0000😀"}', "ok"],
    // Past double's range it parses as Infinity, and would go on as null (absent) once serialised.
    ["a number past double's range", '{"prompt":"x","max_tokens":1e400}', "max_tokens"],
    ["one past it, negative, in a nested value", '{"logit_bias":{"5":-1e999}}', "logit_bias.5"],
    ["in an array", '{"prompt":[1,2,1e309]}', "prompt[2]"],
    ["a large number in range", '{"prompt":"x","seed":1e300}', "ok"],
  ])("%s", (_what, body, want) => {
    expect(verdict(() => parseJsonObject(typeof body === "string" ? bytes(body) : body))).toBe(want);
  });
});

const chat = (extra: object) => ({ messages: [{ role: "user", content: "hi" }], ...extra });
const completion = (extra: object) => ({ prompt: "hi", ...extra });
const embed = (extra: object) => ({ input: "hi", ...extra });

// [kind, body, the param refused or "ok"]
const fieldCases: [RequestKind, object, string][] = [
  ["completion", completion({}), "ok"],
  ["completion", {}, "prompt"],
  ["completion", completion({ prompt: ["a", "b"] }), "ok"],
  ["completion", completion({ prompt: [1, 2, 3] }), "ok"],
  ["completion", completion({ prompt: [[1], [2]] }), "ok"],
  ["completion", completion({ prompt: 5 }), "prompt"],
  ["completion", completion({ prompt: [-1] }), "prompt"],
  ["completion", completion({ prompt: [] }), "prompt"],
  ["completion", completion({ logprobs: 3 }), "ok"],
  ["completion", completion({ logprobs: true }), "logprobs"],
  ["completion", completion({ echo: "yes" }), "echo"],
  ["completion", completion({ best_of: 21 }), "best_of"],
  ["completion", completion({ suffix: null }), "ok"],
  ["chat", chat({}), "ok"],
  ["chat", {}, "messages"],
  ["chat", chat({ messages: [] }), "messages"],
  ["chat", chat({ messages: "hi" }), "messages"],
  ["chat", chat({ messages: [{ content: "x" }] }), "messages[0].role"],
  ["chat", chat({ messages: [{ role: "root", content: "x" }] }), "messages[0].role"],
  ["chat", chat({ messages: [{ role: "user", content: 5 }] }), "messages[0].content"],
  ["chat", chat({ messages: [{ role: "user", content: [{ type: "text", text: "x" }] }] }), "ok"],
  ["chat", chat({ messages: [{ role: "user", content: [{ text: "x" }] }] }), "messages[0].content"],
  ["chat", chat({ messages: [{ role: "assistant", content: null, tool_calls: [{ id: "1", type: "function" }] }] }), "ok"],
  ["chat", chat({ logprobs: 3 }), "logprobs"],
  ["chat", chat({ logprobs: true, top_logprobs: 21 }), "top_logprobs"],
  ["chat", chat({ tools: [{ type: "function", function: { name: "get_weather", parameters: {} } }] }), "ok"],
  ["chat", chat({ tools: [{ type: "function", function: { name: "no spaces" } }] }), "tools[0].function.name"],
  ["chat", chat({ tools: [{ type: "shell", function: { name: "f" } }] }), "tools[0].type"],
  ["chat", chat({ tools: {} }), "tools"],
  ["chat", chat({ tool_choice: "auto" }), "ok"],
  ["chat", chat({ tool_choice: { type: "function", function: { name: "f" } } }), "ok"],
  ["chat", chat({ tool_choice: "always" }), "tool_choice"],
  ["chat", chat({ parallel_tool_calls: 1 }), "parallel_tool_calls"],
  ["chat", chat({ response_format: { type: "json_object" } }), "ok"],
  ["chat", chat({ response_format: { type: "json_schema", json_schema: { name: "x", schema: {} } } }), "ok"],
  ["chat", chat({ response_format: { type: "xml" } }), "response_format.type"],
  ["chat", chat({ response_format: "json" }), "response_format"],
  ["chat", chat({ modalities: ["text"], reasoning_effort: "low" }), "ok"],
  ["completion", completion({ model: "other" }), "ok"],
  ["completion", completion({ model: 5 }), "model"],
  ["completion", completion({ max_tokens: 8, max_completion_tokens: null }), "ok"],
  ["completion", completion({ max_tokens: 0 }), "max_tokens"],
  ["completion", completion({ max_tokens: 1.5 }), "max_tokens"],
  ["completion", completion({ max_tokens: "8" }), "max_tokens"],
  ["completion", completion({ max_tokens: 1e300 }), "max_tokens"],
  ["completion", completion({ max_completion_tokens: -1 }), "max_completion_tokens"],
  ["completion", completion({ temperature: 0 }), "ok"],
  ["completion", completion({ temperature: 2.5 }), "temperature"],
  ["completion", completion({ temperature: "hot" }), "temperature"],
  ["completion", completion({ top_p: 1.1 }), "top_p"],
  ["completion", completion({ n: 0 }), "n"],
  ["completion", completion({ n: 129 }), "n"],
  ["completion", completion({ stop: "\n" }), "ok"],
  ["completion", completion({ stop: ["a", "b", "c", "d"] }), "ok"],
  ["completion", completion({ stop: ["a", "b", "c", "d", "e"] }), "stop"],
  ["completion", completion({ stop: [1] }), "stop"],
  ["completion", completion({ stop: "x".repeat(1025) }), "stop"],
  ["completion", completion({ stream: "true" }), "stream"],
  ["completion", completion({ stream_options: { include_usage: true } }), "ok"],
  ["completion", completion({ stream_options: { include_usage: "yes" } }), "stream_options.include_usage"],
  ["completion", completion({ stream_options: [] }), "stream_options"],
  ["completion", completion({ seed: 42 }), "ok"],
  ["completion", completion({ seed: 2 ** 64 }), "seed"],
  ["completion", completion({ presence_penalty: -2, frequency_penalty: 2 }), "ok"],
  ["completion", completion({ presence_penalty: -3 }), "presence_penalty"],
  ["completion", completion({ logit_bias: { "50256": -100 } }), "ok"],
  ["completion", completion({ logit_bias: { word: 1 } }), "logit_bias key"],
  ["completion", completion({ logit_bias: { "1": 101 } }), "logit_bias value"],
  ["completion", completion({ user: "u".repeat(257) }), "user"],
  ["completion", completion({ metadata: { k: "v" }, store: false, service_tier: "auto" }), "ok"],
  ["completion", completion({ metadata: { k: 1 } }), "metadata value"],
  ["completion", completion({ top_k: 40, min_p: 0.1 }), "ok"],
  ["embeddings", embed({}), "ok"],
  ["embeddings", embed({ input: ["a", "b"], encoding_format: "base64", dimensions: 64, user: "u" }), "ok"],
  ["embeddings", {}, "input"],
  ["embeddings", embed({ input: 5 }), "input"],
  ["embeddings", embed({ input: [] }), "input"],
  ["embeddings", embed({ input: "" }), "input"],
  ["embeddings", embed({ input: ["a", ""] }), "input"],
  ["embeddings", embed({ input: [1, 2] }), "input"],
  ["embeddings", embed({ input: Array.from({ length: 2049 }, () => "a") }), "input"],
  ["embeddings", embed({ encoding_format: "int8" }), "encoding_format"],
  ["embeddings", embed({ dimensions: 0 }), "dimensions"],
  ["embeddings", embed({ dimensions: "64" }), "dimensions"],
  ["embeddings", embed({ user: "u".repeat(257) }), "user"],
  ["embeddings", embed({ model: 5 }), "model"],
  ["embeddings", embed({ pooling: "mean" }), "ok"],
];

describe("OpenAI request fields", () => {
  it.each(fieldCases)("%s %j: %s", (kind, body, want) => {
    expect(verdict(() => checkedRequest(bytes(JSON.stringify(body)), kind))).toBe(want);
  });

  it("drops the caller's model and serialises what was checked (the last of duplicate keys)", () => {
    const { kind, json } = checkedRequest(bytes('{"model":"other","prompt":"a","prompt":"b","max_tokens":2}'), undefined);
    expect(kind).toBe("completion");
    expect(JSON.parse(json)).toEqual({ prompt: "b", max_tokens: 2 });
  });
});

describe("an invoke payload", () => {
  const code = (f: () => unknown) => {
    try {
      f();
      return "ok";
    } catch (err) {
      return Code[(err as ConnectError).code];
    }
  };
  it.each([
    ["plain text", "text/plain", '{"prompt":"x"}', InvokeApi.UNSPECIFIED, "InvalidArgument"],
    ["not JSON", "", "not json", InvokeApi.UNSPECIFIED, "InvalidArgument"],
    ["chat for completions", "application/json", '{"messages":[{"role":"user","content":"x"}]}', InvokeApi.COMPLETIONS, "InvalidArgument"],
    ["a completion", "application/json; charset=utf-8", '{"prompt":"x"}', InvokeApi.UNSPECIFIED, "ok"],
    ["50,000 deep", "application/json", nested(50_000), InvokeApi.UNSPECIFIED, "InvalidArgument"],
    ["embeddings", "application/json", '{"input":["a","b"]}', InvokeApi.EMBEDDINGS, "ok"],
    ["a prompt for embeddings", "application/json", '{"prompt":"x"}', InvokeApi.EMBEDDINGS, "InvalidArgument"],
    ["embeddings streamed", "application/json", '{"input":"x"}', InvokeApi.EMBEDDINGS, "InvalidArgument", true],
    ["an API the contract does not have", "application/json", '{"prompt":"x"}', 9 as InvokeApi, "InvalidArgument"],
  ])("%s: %s", (_what, type, body, api, want, stream = false) => {
    expect(code(() => checkPayload(type, bytes(body), api, stream))).toBe(want);
  });
  it("never infers embeddings: an unnamed API with input is a completion missing its prompt", () => {
    expect(code(() => checkPayload("", bytes('{"input":"x"}'), InvokeApi.UNSPECIFIED))).toBe("InvalidArgument");
    expect(checkPayload("", bytes('{"model":"m","input":"x"}'), InvokeApi.EMBEDDINGS)).toMatchObject({
      api: InvokeApi.EMBEDDINGS,
      body: { input: "x" },
    });
  });
  it.each([
    ["llama.cpp", true, ["llama.cpp"], "ok"],
    ["llama.cpp", false, ["llama.cpp"], "Unimplemented"],
    ["openai-http", false, ["llama.cpp"], "Unimplemented"],
    ["llama.cpp", true, [], "Unimplemented"],
    ["", true, ["llama.cpp"], "Unimplemented"],
  ])("embeddings on engine %j (profile's embeddings %j) of a node advertising %j: %s", (engine, embeddings, advertised, want) => {
    expect(code(() => checkEmbeddings("tiny", { engine, embeddings }, advertised))).toBe(want);
  });
  it("infers chat from messages, and names the field in the refusal", () => {
    expect(checkPayload("", bytes('{"messages":[{"role":"user","content":"x"}]}'), InvokeApi.UNSPECIFIED).api).toBe(
      InvokeApi.CHAT_COMPLETIONS,
    );
    expect(() => checkPayload("", bytes('{"prompt":"x","temperature":9}'), InvokeApi.UNSPECIFIED)).toThrow(
      "payload: temperature: must be a number from 0 to 2",
    );
  });
  it.each([
    [undefined, undefined],
    [{ seconds: 0n, nanos: 1 }, "refused"],
    [{ seconds: 0n, nanos: 0 }, "refused"],
    [{ seconds: -1n, nanos: 0 }, "refused"],
    [{ seconds: 0n, nanos: 999_999 }, "refused"],
    [{ seconds: 0n, nanos: 1_000_000 }, 1],
    [{ seconds: 2n, nanos: 500_000_000 }, 2_500],
  ])("timeout %o -> %s", (timeout, want) => {
    let got: number | string | undefined;
    try {
      got = requestedTimeoutMs(timeout);
    } catch (err) {
      expect((err as ConnectError).code).toBe(Code.InvalidArgument);
      got = "refused";
    }
    expect(got).toBe(want);
  });
  it.each([
    [undefined, undefined, undefined],
    [5_000, undefined, 5_000],
    [5_000, 2_000, 2_000],
    [undefined, 1_234_567 * 0.000001, 2], // "1234567n", as Connect reads a gRPC timeout
    [undefined, 0, undefined],
  ])("the caller's wait: request %s, call deadline %s -> %s", (requested, call, want) => {
    expect(callerWaitMs(requested, call)).toBe(want);
  });
});
