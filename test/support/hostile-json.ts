// Hostile invoke payloads for the edge fuzzer: JSON shapes (encoding, depth, size, duplicates,
// numbers no parser agrees on), and every field of OpenAI's chat and completion requests given one
// hostile value at a time (wrong types, extremes, huge strings, lists and maps, unicode that
// breaks naive code, deep nesting), each as the raw bytes a caller could send.

export interface HostilePayload {
  label: string;
  payload: Uint8Array;
}

const nestedArrays = (depth: number) => `${"[".repeat(depth)}${"]".repeat(depth)}`;
const nestedObjects = (depth: number) => `${'{"a":'.repeat(depth)}1${"}".repeat(depth)}`;
const many = (n: number) => Array.from({ length: n }, (_, i) => i);

/** One hostile value per entry, as JSON text (so values JSON.stringify cannot write are included). */
const hostileValues: [string, string][] = [
  ["null", "null"],
  ["true", "true"],
  ["zero", "0"],
  ["minus one", "-1"],
  ["minus zero", "-0"],
  ["a fraction", "1.5"],
  ["1e400", "1e400"],
  ["-1e400", "-1e400"],
  ["2^53+1", "9007199254740993"],
  ["2^64", "18446744073709551616"],
  ["empty string", '""'],
  ["70,000 characters", JSON.stringify("x".repeat(70_000))],
  ["NUL", '"a\\u0000b"'],
  ["control characters", '"\\u0007\\u001b[31m\\r\\n"'],
  ["unpaired high surrogate", '"\\ud800"'],
  ["reversed surrogates", '"\\udfff\\ud800"'],
  ["emoji, bidi override, combining", JSON.stringify("😀\u202e\u0301\ufeff")],
  ["line separators", '"\\u2028\\u2029"'],
  ["empty list", "[]"],
  ["empty object", "{}"],
  ["5,000-entry list", JSON.stringify(many(5_000).map(() => "x"))],
  ["5,000-key object", JSON.stringify(Object.fromEntries(many(5_000).map((i) => [`k${i}`, i])))],
  ["lists 65 deep", nestedArrays(65)],
  ["objects 65 deep", nestedObjects(65)],
  ["list of null", "[null]"],
  ["list of objects", "[{}]"],
  ["__proto__", '{"__proto__":{"polluted":1}}'],
];

/** Fields of both APIs, of chat only, and of completions only. */
const commonFields = [
  "model",
  "max_tokens",
  "max_completion_tokens",
  "temperature",
  "top_p",
  "n",
  "stop",
  "stream",
  "stream_options",
  "seed",
  "presence_penalty",
  "frequency_penalty",
  "logit_bias",
  "user",
  "metadata",
  "store",
  "service_tier",
  "top_k",
];
const chatFields = [
  "messages",
  "logprobs",
  "top_logprobs",
  "tools",
  "tool_choice",
  "parallel_tool_calls",
  "functions",
  "function_call",
  "response_format",
  "modalities",
  "reasoning_effort",
];
const completionFields = ["prompt", "suffix", "echo", "best_of", "logprobs"];

const chatBase = '"messages":[{"role":"user","content":"hi"}],"max_tokens":2,"temperature":0';
const completionBase = '"prompt":"The quick","max_tokens":2,"temperature":0';

/** Values inside the fields that hold structure: a message, a content part, a tool, a stop list. */
function nestedCases(): [string, string, string][] {
  const out: [string, string, string][] = [];
  for (const [label, v] of hostileValues) {
    out.push([`messages[0].content ${label}`, chatBase.replace('"content":"hi"', `"content":${v}`), ""]);
    out.push([`messages[0].role ${label}`, chatBase.replace('"role":"user"', `"role":${v}`), ""]);
    out.push([`messages[0] extra ${label}`, chatBase.replace('"content":"hi"', `"content":"hi","name":${v}`), ""]);
    out.push([`content part ${label}`, chatBase.replace('"content":"hi"', `"content":[{"type":"text","text":${v}}]`), ""]);
    out.push([`tool function ${label}`, chatBase, `"tools":[{"type":"function","function":{"name":"f","parameters":${v}}}]`]);
    out.push([
      `response_format.json_schema ${label}`,
      chatBase,
      `"response_format":{"type":"json_schema","json_schema":{"name":"s","schema":${v}}}`,
    ]);
    out.push([`stop[0] ${label}`, completionBase, `"stop":[${v}]`]);
    out.push([`prompt[0] ${label}`, completionBase.replace('"prompt":"The quick"', `"prompt":[${v}]`), ""]);
    out.push([`stream_options.include_usage ${label}`, completionBase, `"stream_options":{"include_usage":${v}}`]);
  }
  return out;
}

/** Whole bodies no request should be: broken encodings, shapes and sizes. */
function shapeCases(): HostilePayload[] {
  const text = (label: string, body: string) => ({ label, payload: Buffer.from(body) });
  return [
    text("empty body", ""),
    text("whitespace", "  \n"),
    text("truncated", `{${completionBase}`),
    text("top-level list", `[{${completionBase}}]`),
    text("top-level string", '"prompt"'),
    text("top-level number", "42"),
    text("NaN literal", `{${completionBase},"temperature":NaN}`),
    text("trailing comma", `{${completionBase},}`),
    text("comments", `{/* hi */${completionBase}}`),
    text("duplicate keys", `{${completionBase},"max_tokens":99999,"max_tokens":2}`),
    text("byte order mark", `\ufeff{${completionBase}}`),
    text("lists 64 deep in an unknown field", `{${completionBase},"x":${nestedArrays(63)}}`),
    text("lists 50,000 deep", `{${completionBase},"x":${nestedArrays(50_000)}}`),
    text("objects 50,000 deep", `{${completionBase},"x":${nestedObjects(50_000)}}`),
    text("a 3 MiB prompt", `{"prompt":${JSON.stringify("y".repeat(3 * 1024 * 1024))},"max_tokens":2}`),
    text("a 2 MiB unknown field", `{${completionBase},"x":${JSON.stringify("z".repeat(2 * 1024 * 1024))}}`),
    text("100,000 messages", `{"messages":${JSON.stringify(many(100_000).map(() => ({ role: "user", content: "a" })))},"max_tokens":2}`),
    {
      label: "invalid UTF-8",
      payload: Buffer.concat([Buffer.from(`{${completionBase},"user":"`), Buffer.from([0xff, 0xfe]), Buffer.from('"}')]),
    },
    { label: "UTF-16", payload: Buffer.from(`{${completionBase}}`, "utf16le") },
    { label: "overlong UTF-8 NUL", payload: Buffer.concat([Buffer.from('{"prompt":"a'), Buffer.from([0xc0, 0x80]), Buffer.from('"}')]) },
  ];
}

/** Every hostile payload: shapes, then each field of each API with each hostile value, then nested values. */
export function hostilePayloads(): HostilePayload[] {
  const out = shapeCases();
  const body = (base: string, extra: string) => Buffer.from(extra === "" ? `{${base}}` : `{${base},${extra}}`);
  for (const [label, v] of hostileValues) {
    for (const field of [...commonFields, ...chatFields]) {
      const base = field === "messages" ? '"max_tokens":2' : chatBase;
      out.push({ label: `chat ${field}: ${label}`, payload: body(base, `"${field}":${v}`) });
    }
    for (const field of [...commonFields, ...completionFields]) {
      const base = field === "prompt" ? '"max_tokens":2' : completionBase;
      out.push({ label: `completion ${field}: ${label}`, payload: body(base, `"${field}":${v}`) });
    }
  }
  for (const [label, base, extra] of nestedCases()) out.push({ label, payload: body(base, extra) });
  return out;
}
