// Tool calls, pure: the JSON an answer must be when a call is required (one object naming a tool
// and its arguments, held by a grammar to the tool's parameter schema), and an answer read back as
// a call in OpenAI's shape.
import type { JsonSchema } from "./json-schema.js";

export interface ToolFunction {
  name: string;
  description: string;
  parameters: JsonSchema;
}

/** Which tool the model must call: none, any (auto: text or a call), one of them (required), or a named one. */
export type ToolChoice = { kind: "none" } | { kind: "auto" } | { kind: "required" } | { kind: "function"; name: string };

/** The schema a required (or named) call's answer is held to; undefined when the model may answer in text. */
export function toolCallSchema(tools: readonly ToolFunction[], choice: ToolChoice): JsonSchema | undefined {
  if (choice.kind !== "required" && choice.kind !== "function") return undefined;
  const callable = choice.kind === "function" ? tools.filter((t) => t.name === choice.name) : tools;
  const calls = callable.map((t) => ({
    type: "object",
    properties: { name: { const: t.name }, arguments: t.parameters },
    required: ["name", "arguments"],
    additionalProperties: false,
  }));
  return calls.length === 1 ? calls[0]! : { oneOf: calls };
}

/** What the model is told of the tools, and how to call one, in a system message. */
export function toolInstructions(tools: readonly ToolFunction[], choice: ToolChoice): string {
  if (tools.length === 0 || choice.kind === "none") return "";
  const list = tools.map((t) => JSON.stringify({ name: t.name, description: t.description, parameters: t.parameters })).join("\n");
  const how =
    choice.kind === "auto"
      ? 'To call a tool, answer with only a JSON object {"name": <tool name>, "arguments": <arguments object>}; otherwise answer in text.'
      : 'Answer with only a JSON object {"name": <tool name>, "arguments": <arguments object>}.';
  return `You can call these tools:\n${list}\n${how}`;
}

/** An answer read as a call to one of the tools, or undefined when it is text. */
export function parseToolCall(text: string, tools: readonly ToolFunction[]): { name: string; arguments: string } | undefined {
  const trimmed = text.trim();
  if (!trimmed.startsWith("{")) return undefined;
  let value: unknown;
  try {
    value = JSON.parse(trimmed);
  } catch {
    return undefined;
  }
  const call = value as { name?: unknown; arguments?: unknown };
  if (typeof call !== "object" || call === null || typeof call.name !== "string" || !tools.some((t) => t.name === call.name))
    return undefined;
  if (typeof call.arguments !== "object" || call.arguments === null || Array.isArray(call.arguments)) return undefined;
  return { name: call.name, arguments: JSON.stringify(call.arguments) };
}
