// What the built-in engine does with each field of an OpenAI request before llama-server gets it,
// and with llama-server's answer after (agent/engines/llama-cpp/request.ts, json-schema.ts,
// tool-calls.ts, answer.ts), as tables: every field honoured is passed on in llama-server's terms,
// every other refused naming it; schemas the grammar cannot hold an answer to are refused naming
// the keyword; an answer that is a call comes back as tool_calls, whole or streamed.
import { describe, expect, it } from "vitest";
import { OpenAiError } from "../../agent/engines/openai-protocol.js";
import { prepareChat, prepareCompletion, prepareEmbeddings, requestLimits, type Prepared } from "../../agent/engines/llama-cpp/request.js";
import { checkJsonSchema } from "../../agent/engines/llama-cpp/json-schema.js";
import { parseToolCall, toolCallSchema } from "../../agent/engines/llama-cpp/tool-calls.js";
import { shapeAnswer, StreamShaper } from "../../agent/engines/llama-cpp/answer.js";

const refusal = (f: () => unknown) => {
  try {
    f();
  } catch (e) {
    return e instanceof OpenAiError ? `${e.status} ${e.param}` : `other ${(e as Error).message}`;
  }
  return "accepted";
};
const chat = (extra: object = {}) => ({ messages: [{ role: "user", content: "hi" }], ...extra });
const tool = (name: string, parameters: object = { type: "object", properties: { city: { type: "string" } }, required: ["city"] }) => ({
  type: "function",
  function: { name, parameters },
});

describe("completion requests", () => {
  it.each([
    [{ prompt: "hi" }, "accepted"],
    [{ prompt: "hi", max_tokens: 4096, temperature: 0, stop: ["\n"], seed: 7, stream: true }, "accepted"],
    [{ prompt: "hi", top_p: 0.9, top_k: 40, min_p: 0.05, presence_penalty: -1, frequency_penalty: 2, repeat_penalty: 1.1 }, "accepted"],
    [{ prompt: "hi", logit_bias: { "42": -100, "7": 5 }, logprobs: 5, user: "u1", metadata: { a: "b" } }, "accepted"],
    [{ prompt: "hi", response_format: { type: "json_object" } }, "accepted"],
    [{ prompt: "hi", n: 1, echo: false, best_of: 1, store: false, service_tier: "auto" }, "accepted"],
    [null, "400 body"],
    [{ prompt: ["a", "b"] }, "400 prompt"],
    [{ prompt: "hi", max_tokens: 0 }, "400 max_tokens"],
    [{ prompt: "hi", max_tokens: requestLimits.maxTokensCeiling + 1 }, "400 max_tokens"],
    [{ prompt: "hi", max_tokens: 4097 }, "400 max_tokens", { contextSize: 4096 }],
    [{ prompt: "hi", max_tokens: 4096 }, "accepted", { contextSize: 4096 }],
    [{ prompt: "hi", temperature: -0.1 }, "400 temperature"],
    [{ prompt: "hi", top_p: 1.5 }, "400 top_p"],
    [{ prompt: "hi", top_k: 1.5 }, "400 top_k"],
    [{ prompt: "hi", presence_penalty: 3 }, "400 presence_penalty"],
    [{ prompt: "hi", logit_bias: { x: 1 } }, "400 logit_bias"],
    [{ prompt: "hi", logit_bias: { "1": 101 } }, "400 logit_bias"],
    [{ prompt: "hi", logprobs: 6 }, "400 logprobs"],
    [{ prompt: "hi", seed: -1 }, "400 seed"],
    [{ prompt: "hi", stop: ["a", "b", "c", "d", "e"] }, "400 stop"],
    [{ prompt: "hi", n: 2 }, "accepted"],
    [{ prompt: "hi", n: requestLimits.choices + 1 }, "400 n"],
    [{ prompt: "hi", n: 0 }, "400 n"],
    [{ prompt: "hi", echo: true }, "400 echo"],
    [{ prompt: "hi", best_of: 3 }, "400 best_of"],
    [{ prompt: "hi", suffix: "end" }, "400 suffix"],
    [{ prompt: "hi", store: true }, "400 store"],
    [{ prompt: "hi", mirostat: 2 }, "400 mirostat"],
    [{ prompt: "hi", response_format: { type: "xml" } }, "400 response_format.type"],
  ] as [unknown, string, { contextSize: number }?][])("%j -> %s", (body, want, limits) => {
    expect(refusal(() => prepareCompletion(body, limits))).toBe(want);
  });

  it("passes every sampling field it honours to llama-server, and drops what changes nothing", () => {
    const r = prepareCompletion({
      prompt: "p",
      model: "tiny",
      user: "u",
      temperature: 0.5,
      top_p: 0.9,
      top_k: 40,
      min_p: 0.1,
      seed: 3,
      presence_penalty: 0.5,
      frequency_penalty: 0.25,
      repeat_penalty: 1.2,
      logit_bias: { "5": -100 },
      stop: "x",
      logprobs: 2,
      n: 3,
      stream: true,
      stream_options: { include_usage: true, continuous_usage_stats: true },
    });
    expect(r.body).toEqual({
      prompt: "p",
      stream: true,
      n: 3,
      max_tokens: 16,
      temperature: 0.5,
      top_p: 0.9,
      top_k: 40,
      min_p: 0.1,
      seed: 3,
      presence_penalty: 0.5,
      frequency_penalty: 0.25,
      repeat_penalty: 1.2,
      logit_bias: { "5": -100 },
      stop: ["x"],
      n_probs: 2,
      stream_options: { include_usage: true },
      timings_per_token: true,
    });
    expect(r.completionLogprobs).toBe(true);
    expect(r.runningUsage).toBe(true);
  });

  it("defaults as OpenAI does: 16 tokens for a completion, temperature 1, not streamed", () => {
    expect(prepareCompletion({ prompt: "p" })).toEqual({ body: { prompt: "p", stream: false, max_tokens: 16, temperature: 1 } });
    expect(prepareChat({ messages: [{ role: "user", content: "x" }] }).body).toEqual({
      stream: false,
      temperature: 1,
      messages: [{ role: "user", content: "x" }],
    });
  });
});

describe("chat requests", () => {
  it.each([
    [chat(), "accepted"],
    [
      {
        messages: [
          { role: "developer", content: "d" },
          { role: "user", content: [{ type: "text", text: "x" }] },
        ],
      },
      "accepted",
    ],
    [chat({ logprobs: true, top_logprobs: 3 }), "accepted"],
    [chat({ tools: [tool("weather")], tool_choice: "required", parallel_tool_calls: false }), "accepted"],
    [chat({ tools: [tool("weather")], tool_choice: { type: "function", function: { name: "weather" } } }), "accepted"],
    [
      {
        messages: [
          { role: "user", content: "hi" },
          {
            role: "assistant",
            content: null,
            tool_calls: [{ id: "c1", type: "function", function: { name: "weather", arguments: "{}" } }],
          },
          { role: "tool", tool_call_id: "c1", content: "sunny" },
        ],
        tools: [tool("weather")],
      },
      "accepted",
    ],
    [
      chat({
        response_format: {
          type: "json_schema",
          json_schema: { name: "x", schema: { type: "object", properties: { a: { type: "integer" } } } },
        },
      }),
      "accepted",
    ],
    [{ messages: [] }, "400 messages"],
    [{ messages: [{ role: "tool", content: "x" }] }, "400 messages[0].tool_call_id"],
    [{ messages: [{ role: "user", content: [{ type: "image_url", image_url: { url: "x" } }] }] }, "400 messages[0].content[0]"],
    [{ messages: [{ role: "robot", content: "x" }] }, "400 messages[0].role"],
    [chat({ top_logprobs: 3 }), "400 top_logprobs"],
    [chat({ top_logprobs: 21, logprobs: true }), "400 top_logprobs"],
    [chat({ tool_choice: "required" }), "400 tool_choice"],
    [chat({ tools: [tool("weather")], tool_choice: { type: "function", function: { name: "other" } } }), "400 tool_choice"],
    [chat({ tools: [tool("a"), tool("a")] }), "400 tools[1].function.name"],
    [chat({ tools: [{ type: "code_interpreter" }] }), "400 tools[0].type"],
    [
      chat({ tools: [tool("w", { type: "object", properties: { n: { type: "number", minimum: 1 } } })] }),
      "400 tools[0].function.parameters.properties.n.minimum",
    ],
    [chat({ n: 2, logprobs: true }), "accepted"],
    [
      chat({ response_format: { type: "json_schema", json_schema: { name: "x", schema: { type: "string", pattern: "^a" } } } }),
      "400 response_format.json_schema.schema.pattern",
    ],
    [chat({ tools: [tool("w")], response_format: { type: "json_object" } }), "400 response_format"],
    [chat({ functions: [] }), "400 functions"],
    [chat({ modalities: ["text", "audio"] }), "400 modalities"],
  ])("%j -> %s", (body, want) => {
    expect(refusal(() => prepareChat(body))).toBe(want);
  });

  it("tells the tools in the system message, writes past calls and results as turns, and holds a required call to its schema", () => {
    const r = prepareChat({
      messages: [
        { role: "system", content: "Be brief." },
        { role: "user", content: "weather?" },
        { role: "assistant", tool_calls: [{ id: "c1", type: "function", function: { name: "w", arguments: '{"city":"Oslo"}' } }] },
        { role: "tool", tool_call_id: "c1", content: [{ type: "text", text: "sunny" }] },
      ],
      tools: [tool("w")],
      tool_choice: "required",
    });
    const messages = r.body.messages as { role: string; content: string }[];
    expect(messages.map((m) => m.role)).toEqual(["system", "user", "assistant", "user"]);
    expect(messages[0]!.content).toMatch(/^Be brief\.\n\nYou can call these tools:\n\{"name":"w"/);
    expect(messages[2]!.content).toBe('{"name":"w","arguments":{"city":"Oslo"}}');
    expect(messages[3]!.content).toBe("Result of tool call c1:\nsunny");
    expect(r.body.response_format).toEqual({
      type: "json_schema",
      json_schema: { name: "tool_call", schema: toolCallSchema(r.tools!.functions, { kind: "required" }) },
    });
    expect(r.body).not.toHaveProperty("tools");
    expect(r.tools?.choice).toEqual({ kind: "required" });
  });

  it("under auto, tells the tools and holds the answer to nothing; under none, offers nothing", () => {
    const auto = prepareChat(chat({ tools: [tool("w")] }));
    expect(auto.body.response_format).toBeUndefined();
    expect((auto.body.messages as { role: string }[])[0]!.role).toBe("system");
    const none = prepareChat(chat({ tools: [tool("w")], tool_choice: "none" }));
    expect(none.tools).toBeUndefined();
    expect(none.body.messages).toEqual([{ role: "user", content: "hi" }]);
  });
});

describe("embeddings requests", () => {
  it.each([
    [{ input: "hi" }, "accepted"],
    [{ input: ["a", "b"], encoding_format: "base64", model: "m", user: "u" }, "accepted"],
    [null, "400 body"],
    [{}, "400 input"],
    [{ input: [] }, "400 input"],
    [{ input: ["a", ""] }, "400 input"],
    [{ input: [[1, 2]] }, "400 input"],
    [{ input: "x".repeat(requestLimits.embeddingInputChars) }, "accepted"],
    [{ input: "x".repeat(requestLimits.embeddingInputChars + 1) }, "400 input"],
    [{ input: Array.from({ length: requestLimits.embeddingInputs + 1 }, () => "a") }, "400 input"],
    [{ input: "hi", encoding_format: "int8" }, "400 encoding_format"],
    [{ input: "hi", dimensions: 8 }, "400 dimensions"],
    [{ input: "hi", truncate: true }, "400 truncate"],
  ])("%j -> %s", (body, want) => {
    expect(refusal(() => prepareEmbeddings(body))).toBe(want);
  });
});

describe("JSON schemas an answer is held to", () => {
  it.each([
    [{ type: "object", properties: { a: { type: "string", maxLength: 5 } }, required: ["a"], additionalProperties: false }, "accepted"],
    [{ type: ["string", "null"] }, "accepted"],
    [{ anyOf: [{ type: "string" }, { type: "null" }], title: "T", default: null }, "accepted"],
    [{ $defs: { p: { type: "integer" } }, type: "array", items: { $ref: "#/$defs/p" }, minItems: 1 }, "accepted"],
    [{ enum: ["a", 1, true, null] }, "accepted"],
    [{ type: "string", format: "date-time" }, "accepted"],
    [true, "accepted"],
    [{ type: "integer", minimum: 0, exclusiveMaximum: 10 }, "accepted"],
    [{ type: "string", format: "uuid" }, "accepted"],
    [{ definitions: { p: { type: "string" } }, $ref: "#/definitions/p" }, "accepted"],
    [{ type: "number", minimum: 0 }, "400 s.minimum"],
    [{ type: "integer", maximum: 1.5 }, "400 s.maximum"],
    [{ type: "string", pattern: "^a$" }, "400 s.pattern"],
    [{ type: "object", minProperties: 1 }, "400 s.minProperties"],
    [{ type: "number", multipleOf: 2 }, "400 s.multipleOf"],
    [{ type: "string", format: "email" }, "400 s.format"],
    [{ allOf: [] }, "400 s.allOf"],
    [{ type: "object", patternProperties: {} }, "400 s.patternProperties"],
    [{ $ref: "https://example.com/x" }, "400 s.$ref"],
    [{ type: "spaceship" }, "400 s.type"],
    ["string", "400 s"],
  ])("%j -> %s", (schema, want) => {
    expect(refusal(() => checkJsonSchema(schema, "s"))).toBe(want);
  });

  it("takes no inherited name for a keyword, and keeps a property named like one", () => {
    expect(refusal(() => checkJsonSchema(JSON.parse('{"type":"object","__proto__":{"type":"string"}}'), "s"))).toBe("400 s.__proto__");
    expect(refusal(() => checkJsonSchema({ type: "object", constructor: {} }, "s"))).toBe("400 s.constructor");
    const named = checkJsonSchema(
      JSON.parse('{"type":"object","properties":{"__proto__":{"type":"string"}},"required":["__proto__"]}'),
      "s",
    );
    expect(JSON.parse(JSON.stringify(named))).toEqual({
      type: "object",
      properties: { ["__proto__"]: { type: "string" } },
      required: ["__proto__"],
    });
  });

  it("keeps descriptions and drops the other annotations", () => {
    expect(checkJsonSchema({ anyOf: [{ type: "string", description: "d" }, { type: "null" }], title: "T" }, "s")).toEqual({
      anyOf: [{ type: "string", description: "d" }, { type: "null" }],
    });
  });

  it("refuses a schema nested too deep or too large", () => {
    let deep: object = { type: "string" };
    for (let i = 0; i < 40; i++) deep = { type: "array", items: deep };
    expect(refusal(() => checkJsonSchema(deep, "s"))).toMatch(/^400 /);
  });
});

describe("tool calls", () => {
  const tools = [
    { name: "weather", description: "", parameters: { type: "object", properties: { city: { type: "string" } } } },
    { name: "time", description: "", parameters: { type: "object", properties: {} } },
  ];

  it("holds a required call to one of the tools, a named one to that tool, and auto or none to nothing", () => {
    expect(toolCallSchema(tools, { kind: "required" })).toMatchObject({
      oneOf: [{ properties: { name: { const: "weather" } } }, { properties: { name: { const: "time" } } }],
    });
    expect(toolCallSchema(tools, { kind: "function", name: "time" })).toMatchObject({
      properties: { name: { const: "time" } },
      required: ["name", "arguments"],
    });
    expect(toolCallSchema(tools, { kind: "auto" })).toBeUndefined();
    expect(toolCallSchema(tools, { kind: "none" })).toBeUndefined();
  });

  it.each([
    [' {"name":"weather","arguments":{"city":"Oslo"}} ', { name: "weather", arguments: '{"city":"Oslo"}' }],
    ['{"name":"unknown","arguments":{}}', undefined],
    ['{"name":"weather","arguments":"x"}', undefined],
    ["It is sunny.", undefined],
    ['{"name": "weather", "arguments": {', undefined],
  ])("reads %j as %j", (text, want) => {
    expect(parseToolCall(text, tools)).toEqual(want);
  });
});

describe("answers read back", () => {
  const tools = [tool("w")].map((t) => ({
    name: t.function.name,
    description: "",
    parameters: t.function.parameters as Record<string, unknown>,
  }));
  const required = { body: {}, tools: { functions: tools, choice: { kind: "required" as const } } };
  const auto = { body: {}, tools: { functions: tools, choice: { kind: "auto" as const } } };

  it("turns a whole answer that is a call into tool_calls, and leaves text as it is", () => {
    const call = shapeAnswer(required, {
      choices: [{ index: 0, message: { role: "assistant", content: '{"name":"w","arguments":{"city":"Oslo"}}' }, finish_reason: "stop" }],
    });
    expect(call.choices).toEqual([
      {
        index: 0,
        message: {
          role: "assistant",
          content: null,
          tool_calls: [{ id: expect.stringMatching(/^call_/), type: "function", function: { name: "w", arguments: '{"city":"Oslo"}' } }],
        },
        finish_reason: "tool_calls",
      },
    ]);
    const text = shapeAnswer(auto, { choices: [{ index: 0, message: { role: "assistant", content: "Sunny." }, finish_reason: "stop" }] });
    expect(text.choices).toEqual([{ index: 0, message: { role: "assistant", content: "Sunny." }, finish_reason: "stop" }]);
  });

  const chunk = (content: string | undefined, finish: string | null = null, role?: string) => ({
    choices: [{ index: 0, delta: { ...(role ? { role } : {}), ...(content !== undefined ? { content } : {}) }, finish_reason: finish }],
  });
  const run = (prepared: Prepared, chunks: object[]) => {
    const shaper = new StreamShaper(prepared);
    return chunks
      .flatMap((c) => shaper.chunk(structuredClone(c) as Record<string, unknown>))
      .map(
        (c) => (c.choices as { delta: unknown; finish_reason: unknown }[]).map(({ delta, finish_reason }) => ({ delta, finish_reason }))[0],
      );
  };

  it.each([
    [
      "a required call, streamed: held, then one delta.tool_calls",
      required,
      [chunk("", null, "assistant"), chunk('{"name":"w",'), chunk('"arguments":{"city":"Oslo"}}'), chunk(undefined, "stop")],
      [
        { delta: { role: "assistant" }, finish_reason: null },
        {
          delta: {
            tool_calls: [
              { index: 0, id: expect.stringMatching(/^call_/), type: "function", function: { name: "w", arguments: '{"city":"Oslo"}' } },
            ],
          },
          finish_reason: "tool_calls",
        },
      ],
    ],
    [
      "auto and text: passes from the first character that is not blank",
      auto,
      [chunk(" "), chunk("Sun"), chunk("ny."), chunk(undefined, "stop")],
      [
        { delta: { content: " Sun" }, finish_reason: null },
        { delta: { content: "ny." }, finish_reason: null },
        { delta: {}, finish_reason: "stop" },
      ],
    ],
    [
      "auto and a brace that is no call: the text, whole, at the end",
      auto,
      [chunk("{not"), chunk(" json"), chunk(undefined, "length")],
      [{ delta: { content: "{not json" }, finish_reason: "length" }],
    ],
  ] as [string, Prepared, object[], object[]][])("%s", (_what, prepared, chunks, want) => {
    expect(run(prepared, chunks)).toEqual(want);
  });

  it("passes a stream through untouched when nothing is to be read back", () => {
    expect(new StreamShaper({ body: {} }).active).toBe(false);
  });

  it("sends a stream's usage in a chunk of its own, as OpenAI does, not on the last token chunk", () => {
    const usage = { prompt_tokens: 2, completion_tokens: 3, total_tokens: 5 };
    const out = new StreamShaper({ body: {} }).chunk({
      id: "x",
      choices: [{ index: 0, text: "", finish_reason: "length" }],
      usage,
      timings: { predicted_n: 3 },
    });
    expect(out).toEqual([
      { id: "x", choices: [{ index: 0, text: "", finish_reason: "length" }] },
      { id: "x", choices: [], usage },
    ]);
  });

  it("gives every chunk the usage so far when the stream asked for it, from llama-server's timings", () => {
    const asked = prepareCompletion({ prompt: "p", stream: true, stream_options: { include_usage: true, continuous_usage_stats: true } });
    expect(asked.body.timings_per_token).toBe(true);
    expect(prepareCompletion({ prompt: "p", stream: true }).body).not.toHaveProperty("timings_per_token");
    const [chunk] = new StreamShaper(asked).chunk({
      choices: [{ index: 0, text: "a" }],
      timings: { cache_n: 3, prompt_n: 2, predicted_n: 4 },
    });
    expect(chunk).toEqual({
      choices: [{ index: 0, text: "a" }],
      usage: { prompt_tokens: 5, completion_tokens: 4, total_tokens: 9, prompt_tokens_details: { cached_tokens: 3 } },
    });
  });

  it("gives a completion's logprobs in the legacy shape, offsets running across chunks", () => {
    const lp = (token: string, alt: string) => ({
      content: [{ token, logprob: -1, bytes: [], top_logprobs: [{ token: alt, logprob: -2 }] }],
    });
    const shaper = new StreamShaper({ body: {}, completionLogprobs: true });
    const out = [
      shaper.chunk({ choices: [{ index: 0, text: "ab", logprobs: lp("ab", "x") }] }),
      shaper.chunk({ choices: [{ index: 0, text: "c", logprobs: lp("c", "y") }] }),
    ].map((c) => (c[0]!.choices as { logprobs: unknown }[])[0]!.logprobs);
    expect(out).toEqual([
      { tokens: ["ab"], token_logprobs: [-1], top_logprobs: [{ x: -2 }], text_offset: [0] },
      { tokens: ["c"], token_logprobs: [-1], top_logprobs: [{ y: -2 }], text_offset: [2] },
    ]);
  });
});
