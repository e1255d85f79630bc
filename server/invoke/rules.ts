// The relay's rules, pure: who may call which deployment, which replica answers, how long it may
// take, whether a payload is a well-formed request of its API, and how a node's refusal maps onto
// the contract.
import { Code, ConnectError } from "@connectrpc/connect";
import { InvokeApi } from "../../gen/proto/modelforge/deployment/v1/deployment_pb.js";
import type { DeploymentInstance, DeploymentTarget } from "./routes.js";
import { RequestError } from "./json-body.js";
import { checkedRequest, type RequestKind } from "./openai-request.js";

/** What a caller waits when it names no timeout. */
export const defaultInvokeTimeoutMs = 30_000;

/** Where a new invoke goes: the replicas whose node's Session is on this control plane, else the candidates whose Session may be on another. */
export type InvokeRoute = { here: DeploymentInstance[] } | { elsewhere: DeploymentInstance[] };

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
    case "PENDING":
    case "LOADING":
    case "READY":
    case "DEGRADED":
      break;
  }
  if (target.ready.length === 0) throw new ConnectError(`deployment ${target.name} is not ready yet`, Code.FailedPrecondition);
  const here = target.ready.filter((i) => connected(i.nodeId));
  return here.length > 0 ? { here } : { elsewhere: target.ready };
}

/** A replica's requests as routing sees them. */
export interface ReplicaLoad {
  /** In flight through this control plane: exact, and what max_in_flight bounds. */
  inFlight: number;
  /** Waiting for its runtime on the node, by the node's latest heartbeat: what other control planes sent counts too. */
  queued: number;
}

/**
 * The replica a request goes to, by power of two choices (Mitzenmacher; Ray Serve routes so): two
 * candidates drawn at random, the one with fewer requests (this control plane's in flight plus the
 * node's reported queue) wins, the first drawn on a tie. Only replicas below their bound (on this
 * control plane's own count) and not yet tried are drawn; undefined when none is left. `random`
 * gives [0, 1).
 */
export function pickReplica<T>(candidates: readonly T[], load: (c: T) => ReplicaLoad, bound: number, random: () => number): T | undefined {
  return powerOfTwo(openReplicas(candidates, load, bound), load, random);
}

/** The candidates below their bound on requests in flight (none when 0). */
export function openReplicas<T>(candidates: readonly T[], load: (c: T) => ReplicaLoad, bound: number): T[] {
  return candidates.filter((c) => bound <= 0 || load(c).inFlight < bound);
}

/** A replica's requests: in flight here and queued on its node. */
export const weightOf = (l: ReplicaLoad) => l.inFlight + l.queued;

/** Power of two choices among replicas already known open. */
export function powerOfTwo<T>(open: readonly T[], load: (c: T) => ReplicaLoad, random: () => number): T | undefined {
  if (open.length <= 1) return open[0];
  const a = Math.floor(random() * open.length);
  const b = (a + 1 + Math.floor(random() * (open.length - 1))) % open.length;
  return weightOf(load(open[b]!)) < weightOf(load(open[a]!)) ? open[b] : open[a];
}

/**
 * Whether a node's refusal came before the runtime started the request, so another replica may
 * take it: the node no longer holds it (unavailable) or the runtime answered 429/503 before
 * starting (resource_exhausted).
 */
export function refusedBeforeStart(code: Code): boolean {
  return code === Code.Unavailable || code === Code.ResourceExhausted;
}

/**
 * Whether an instance may be sent an embeddings request: its engine (by its runtime profile) is one
 * its node's agent advertised as serving them, and for the built-in engine its profile turned them
 * on. Else unimplemented, which the OpenAI API answers as 400 embeddings_unsupported.
 */
export function checkEmbeddings(name: string, instance: { engine: string; embeddings: boolean }, advertised: readonly string[]): void {
  if (instance.engine === "" || !advertised.includes(instance.engine)) {
    throw new ConnectError(`deployment ${name}'s engine serves no embeddings`, Code.Unimplemented);
  }
  if (instance.engine === "llama.cpp" && !instance.embeddings) {
    throw new ConnectError(
      `deployment ${name}'s runtime profile does not serve embeddings (create one with embeddings on: forge runtimes create --embeddings)`,
      Code.Unimplemented,
    );
  }
}

/** The refusal when no replica can reach a node serving the deployment. */
export function unreachable(name: string, why: string): ConnectError {
  return new ConnectError(`the node serving deployment ${name} is not reachable: ${why}`, Code.Unavailable);
}

/**
 * The caller's wait: the request's timeout and the call's own deadline (a gRPC timeout header may
 * name nanoseconds), whichever is shorter, in whole milliseconds up: a fraction cannot be encoded
 * as the Duration the node is sent.
 */
export function callerWaitMs(requestedMs: number | undefined, callMs: number | undefined): number | undefined {
  const given = [requestedMs, callMs].filter((v): v is number => v !== undefined && v > 0);
  return given.length === 0 ? undefined : Math.ceil(Math.min(...given));
}

/** The shorter of the caller's timeout (default 30 s) and the deployment's own. */
export function invokeTimeoutMs(requestedMs: number | undefined, deploymentMs: number): number {
  const requested = requestedMs !== undefined && requestedMs > 0 ? requestedMs : defaultInvokeTimeoutMs;
  return deploymentMs > 0 ? Math.min(requested, deploymentMs) : requested;
}

/** A payload checked as an OpenAI-compatible request of its API, re-serialised as it was checked. */
export interface CheckedPayload {
  api: InvokeApi.COMPLETIONS | InvokeApi.CHAT_COMPLETIONS | InvokeApi.EMBEDDINGS;
  payload: Uint8Array;
  /** The checked body, without `model`. */
  body: Record<string, unknown>;
}

const kinds = {
  [InvokeApi.COMPLETIONS]: "completion",
  [InvokeApi.CHAT_COMPLETIONS]: "chat",
  [InvokeApi.EMBEDDINGS]: "embeddings",
} as const;
const apis = { completion: InvokeApi.COMPLETIONS, chat: InvokeApi.CHAT_COMPLETIONS, embeddings: InvokeApi.EMBEDDINGS } as const;

/**
 * The payload checked for its API (chat when unspecified and the JSON has "messages"), or
 * invalid_argument naming the field: run before routing, so bad input never reaches a node.
 */
export function checkPayload(
  contentType: string,
  payload: Uint8Array,
  api: InvokeApi,
  stream = false,
  parsed?: Record<string, unknown>,
): CheckedPayload {
  if (api === InvokeApi.EMBEDDINGS && stream)
    throw new ConnectError("api: embeddings are never streamed; use Invoke", Code.InvalidArgument);
  if (contentType !== "" && !/^application\/json(\s*;.*)?$/i.test(contentType)) {
    throw new ConnectError(`content_type: ${contentType} is not supported; send application/json`, Code.InvalidArgument);
  }
  try {
    const kind = kinds[api as keyof typeof kinds] as RequestKind | undefined;
    if (api !== InvokeApi.UNSPECIFIED && kind === undefined) throw new ConnectError(`api: ${api} is not an API`, Code.InvalidArgument);
    const checked = checkedRequest(parsed ?? payload, kind);
    return { api: apis[checked.kind], payload: Buffer.from(checked.json), body: checked.body };
  } catch (err) {
    if (err instanceof RequestError) throw new ConnectError(`payload: ${err.message}`, Code.InvalidArgument);
    throw err;
  }
}

/** A timeout the caller set, in milliseconds; under 1 ms (zero, negative, a nanosecond) is refused, not taken as the default. */
export function requestedTimeoutMs(timeout: { seconds: bigint; nanos: number } | undefined): number | undefined {
  if (timeout === undefined) return undefined;
  const ms = Number(timeout.seconds) * 1000 + timeout.nanos / 1e6;
  if (!(ms >= 1)) throw new ConnectError("timeout: must be at least 1 ms (leave it unset for the default)", Code.InvalidArgument);
  return Math.round(ms);
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

/** Counts requests in flight per replica (by its key) against its bound. */
export class InFlight {
  private readonly counts = new Map<string, number>();

  /** Takes a slot, or false when the replica already has `max` in flight. */
  acquire(key: string, max: number): boolean {
    const n = this.counts.get(key) ?? 0;
    if (max > 0 && n >= max) return false;
    this.counts.set(key, n + 1);
    return true;
  }

  release(key: string): void {
    const n = (this.counts.get(key) ?? 1) - 1;
    if (n <= 0) this.counts.delete(key);
    else this.counts.set(key, n);
  }

  of(key: string): number {
    return this.counts.get(key) ?? 0;
  }
}

/** A replica's key in InFlight: its deployment, revision and slot (a node may hold several). */
export const replicaKey = (deploymentId: string, revision: bigint, replica: number) => `${deploymentId}/${revision}/${replica}`;
