// The relay's rules, pure: who may call which deployment, which instance answers, how long it may
// take, which runtime API a payload is for, and how a node's refusal maps onto the contract.
import { Code, ConnectError } from "@connectrpc/connect";
import { InvokeApi } from "../../gen/proto/modelforge/deployment/v1/deployment_pb.js";
import type { DeploymentInstance, DeploymentTarget } from "./routes.js";

/** What a caller waits when it names no timeout. */
export const defaultInvokeTimeoutMs = 30_000;

/** Where a new invoke goes: the instance whose node's Session is on this replica, else the candidates whose Session may be on another. */
export type InvokeRoute = { here: DeploymentInstance } | { elsewhere: DeploymentInstance[] };

/**
 * Where a new invoke goes, or the typed refusal: not_found for a deployment that does not exist or
 * is outside the key's scope (the two look alike to the caller), and the phase's error otherwise.
 * `connected` says whether a node's Session is on this replica.
 */
export function routeInvoke(
  target: DeploymentTarget | undefined,
  scope: ReadonlySet<string>,
  idOrName: string,
  connected: (nodeId: string) => boolean,
): InvokeRoute {
  if (target === undefined || !scope.has(target.name)) throw new ConnectError(`no deployment ${idOrName}`, Code.NotFound);
  switch (target.phase) {
    case "DRAINING":
      throw new ConnectError(`deployment ${target.name} is draining: it takes no new requests`, Code.Unavailable);
    case "UNLOADED":
      throw new ConnectError(`deployment ${target.name} is unloaded`, Code.FailedPrecondition);
    case "FAILED":
      throw new ConnectError(`deployment ${target.name} failed`, Code.FailedPrecondition);
    case "LOADING":
    case "READY":
      break;
  }
  if (target.ready.length === 0) throw new ConnectError(`deployment ${target.name} is not ready yet`, Code.FailedPrecondition);
  // Newest revision first: during a revision change the new one takes new requests as soon as it is ready.
  const here = target.ready.find((i) => connected(i.nodeId));
  return here !== undefined ? { here } : { elsewhere: target.ready };
}

/** The refusal when no replica can reach a node serving the deployment. */
export function unreachable(name: string, why: string): ConnectError {
  return new ConnectError(`the node serving deployment ${name} is not reachable: ${why}`, Code.Unavailable);
}

/** The shorter of the caller's timeout (default 30 s) and the deployment's own. */
export function invokeTimeoutMs(requestedMs: number | undefined, deploymentMs: number): number {
  const requested = requestedMs !== undefined && requestedMs > 0 ? requestedMs : defaultInvokeTimeoutMs;
  return deploymentMs > 0 ? Math.min(requested, deploymentMs) : requested;
}

/** The runtime API a payload is for; chat when unspecified and the JSON has "messages". */
export function apiOf(api: InvokeApi, body: Record<string, unknown>): InvokeApi.COMPLETIONS | InvokeApi.CHAT_COMPLETIONS {
  if (api === InvokeApi.COMPLETIONS || api === InvokeApi.CHAT_COMPLETIONS) return api;
  return Array.isArray(body.messages) ? InvokeApi.CHAT_COMPLETIONS : InvokeApi.COMPLETIONS;
}

/** The payload as an OpenAI-style JSON object, or invalid_argument. */
export function parsePayload(contentType: string, payload: Uint8Array): Record<string, unknown> {
  if (contentType !== "" && !/^application\/json(\s*;.*)?$/i.test(contentType)) {
    throw new ConnectError(`content_type: ${contentType} is not supported; send application/json`, Code.InvalidArgument);
  }
  let body: unknown;
  try {
    body = JSON.parse(Buffer.from(payload.buffer, payload.byteOffset, payload.byteLength).toString("utf8"));
  } catch {
    throw new ConnectError("payload: not valid JSON", Code.InvalidArgument);
  }
  if (typeof body !== "object" || body === null || Array.isArray(body)) {
    throw new ConnectError("payload: must be a JSON object (an OpenAI-compatible request)", Code.InvalidArgument);
  }
  if (!depthWithin(body, maxJsonDepth)) throw new ConnectError(`payload: nests deeper than ${maxJsonDepth} levels`, Code.InvalidArgument);
  return body as Record<string, unknown>;
}

/** How deep an invoke's JSON may nest: OpenAI's requests nest a few levels (tools' JSON schemas a few more). */
export const maxJsonDepth = 64;

/** Whether a parsed JSON value nests at most `limit` levels; iterative, so no depth can exhaust the stack. */
export function depthWithin(value: unknown, limit: number): boolean {
  const stack: [unknown, number][] = [[value, 1]];
  while (stack.length > 0) {
    const [v, depth] = stack.pop()!;
    if (typeof v !== "object" || v === null) continue;
    if (depth > limit) return false;
    for (const child of Object.values(v)) if (typeof child === "object" && child !== null) stack.push([child, depth + 1]);
  }
  return true;
}

/**
 * The body the node's runtime gets: a stream always asks for usage in every chunk (vLLM's
 * continuous_usage_stats; llama.cpp's runtime here does the same), so what it delivers is counted
 * exactly even when it is cut short.
 */
export function payloadForNode(body: Record<string, unknown>, payload: Uint8Array, stream: boolean): Uint8Array {
  if (!stream) return payload;
  const options = typeof body.stream_options === "object" && body.stream_options !== null ? body.stream_options : {};
  return Buffer.from(JSON.stringify({ ...body, stream_options: { ...options, include_usage: true, continuous_usage_stats: true } }));
}

/** The usage the caller asked to see in its stream: a last chunk's, and every chunk's. */
export function callerWantsUsage(body: Record<string, unknown>): { last: boolean; every: boolean } {
  const options = body.stream_options;
  const asked = typeof options === "object" && options !== null ? (options as Record<string, unknown>) : {};
  return { last: asked.include_usage === true, every: asked.include_usage === true && asked.continuous_usage_stats === true };
}

const codesByName: Record<string, Code> = Object.fromEntries(
  Object.entries(Code)
    .filter(([, v]) => typeof v === "number")
    .map(([k, v]) => [k.replace(/([a-z])([A-Z])/g, "$1_$2").toLowerCase(), v as Code]),
);

/** A node's refusal of an invoke, by Connect code name; an unknown name is internal. */
export function nodeRefusal(code: string, message: string): ConnectError {
  return new ConnectError(message, codesByName[code] ?? Code.Internal);
}

/** Counts requests in flight per deployment against its bound. */
export class InFlight {
  private readonly counts = new Map<string, number>();

  /** Takes a slot, or false when the deployment already has `max` in flight. */
  acquire(deploymentId: string, max: number): boolean {
    const n = this.counts.get(deploymentId) ?? 0;
    if (max > 0 && n >= max) return false;
    this.counts.set(deploymentId, n + 1);
    return true;
  }

  release(deploymentId: string): void {
    const n = (this.counts.get(deploymentId) ?? 1) - 1;
    if (n <= 0) this.counts.delete(deploymentId);
    else this.counts.set(deploymentId, n);
  }

  of(deploymentId: string): number {
    return this.counts.get(deploymentId) ?? 0;
  }
}
