// What an OpenAI API request asks for, pure: which endpoint, which deployment (`model` is its
// name), whether it streams, and the body the runtime gets. The deployment decides the model, so
// the runtime's own `model` field is dropped.
import { InvokeApi } from "../../gen/proto/modelforge/deployment/v1/deployment_pb.js";
import { parseJsonObject, RequestError } from "../invoke/json-body.js";
import { openAiFailure, type OpenAiFailure } from "./errors.js";

export type Endpoint =
  | { kind: "models" }
  | { kind: "generate"; api: InvokeApi.CHAT_COMPLETIONS | InvokeApi.COMPLETIONS | InvokeApi.EMBEDDINGS };

const routes: ReadonlyMap<string, { method: string; endpoint: Endpoint }> = new Map([
  ["/v1/models", { method: "GET", endpoint: { kind: "models" } }],
  ["/v1/chat/completions", { method: "POST", endpoint: { kind: "generate", api: InvokeApi.CHAT_COMPLETIONS } }],
  ["/v1/completions", { method: "POST", endpoint: { kind: "generate", api: InvokeApi.COMPLETIONS } }],
  ["/v1/embeddings", { method: "POST", endpoint: { kind: "generate", api: InvokeApi.EMBEDDINGS } }],
]);

/** The endpoint of a method and path (without its query), or the failure to answer. */
export function endpointOf(method: string, path: string): Endpoint | OpenAiFailure {
  const route = routes.get(path.length > 1 && path.endsWith("/") ? path.slice(0, -1) : path);
  if (route === undefined)
    return openAiFailure(404, `no such endpoint: ${method} ${path.slice(0, 128)}`, "invalid_request_error", "unknown_url");
  if (route.method !== method) {
    return openAiFailure(405, `${path} takes ${route.method}, not ${method.slice(0, 16)}`, "invalid_request_error", "method_not_allowed");
  }
  return route.endpoint;
}

export interface GenerateRequest {
  /** The deployment's name. */
  model: string;
  stream: boolean;
  /** The JSON the runtime gets. */
  payload: Uint8Array;
  /** The same, as read and shape-checked here (the relay checks its fields without reading it again). */
  body: Record<string, unknown>;
}

/** A deployment name as the contract allows it (1 to 63 of a-z, 0-9 and '-', from a letter), or a UUID. */
const modelPattern = /^[a-z][a-z0-9-]{0,62}$|^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$/;

const invalid = (message: string, param: string | null = null) =>
  openAiFailure(400, message, "invalid_request_error", "invalid_request", param);

/** The body of a chat, completion or embeddings request, checked for what the front door itself reads. */
export function generateRequestOf(body: Uint8Array): GenerateRequest | OpenAiFailure {
  let parsed: Record<string, unknown>;
  try {
    // UTF-8, a JSON object, nested at most 64 deep: the same reader as every front door's.
    parsed = parseJsonObject(body);
  } catch (err) {
    if (err instanceof RequestError) return invalid(err.message, err.param === "body" ? null : err.param);
    throw err;
  }
  const { model, stream, ...rest } = parsed;
  if (typeof model !== "string" || model === "") return invalid("model: required, the deployment's name", "model");
  if (!modelPattern.test(model)) return invalid("model: not a deployment name", "model");
  if (stream !== undefined && stream !== null && typeof stream !== "boolean") return invalid("stream: must be a boolean", "stream");
  const options = rest.stream_options;
  if (options !== undefined && options !== null) {
    if (typeof options !== "object" || Array.isArray(options)) return invalid("stream_options: must be an object", "stream_options");
    const asked = (options as Record<string, unknown>).include_usage;
    if (asked !== undefined && asked !== null && typeof asked !== "boolean") {
      return invalid("stream_options.include_usage: must be a boolean", "stream_options");
    }
  }
  return { model, stream: stream === true, payload: Buffer.from(JSON.stringify(rest)), body: rest };
}
