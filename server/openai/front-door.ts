// The OpenAI HTTP API on the control plane's one TLS port (HTTP/1.1, as the SDKs speak it, and
// HTTP/2): /v1/models, /v1/chat/completions, /v1/completions and /v1/embeddings, for service keys
// only. A front door, not a second relay: a generation goes through the same InvokeRelay as
// DeploymentService.Invoke (routing, forwarding to the replica holding the node's session, limits
// in flight, cancellation), and only the framing differs. It never logs a body.
import type http2 from "node:http2";
import type { IncomingMessage, ServerResponse } from "node:http";
import type { TLSSocket } from "node:tls";
import { ConnectError, Code } from "@connectrpc/connect";
import { Cancel } from "../../common/cancel.js";
import { abandonerOf, peerOf } from "../context.js";
import { adminTokenHeader } from "../identity/admin-token.js";
import { refuseForeignCredentials } from "../identity/service-keys-auth.js";
import { bearerServiceKey, type ServiceKeys, type ServicePrincipal } from "../identity/service-keys.js";
import type { Logger } from "../observability/logger.js";
import { MAX_INVOKE_PAYLOAD_BYTES } from "../jobs/spec.js";
import type { AnswerPiece, InvokeRelay } from "../invoke/relay.js";
import type { DeploymentRoutes } from "../invoke/routes.js";
import { openAiFailure, openAiFailureOf, type OpenAiFailure } from "./errors.js";
import { endpointOf, generateRequestOf, type GenerateRequest } from "./request.js";
import { renamed } from "./answer.js";
import { answerAfterBody, declaredLength } from "../edge/drain.js";
import { InvokeApi } from "../../gen/proto/modelforge/deployment/v1/deployment_pb.js";
import { headerValue } from "../edge/headers.js";
import { drained } from "../../common/drained.js";

type HttpRequest = http2.Http2ServerRequest | IncomingMessage;
type HttpResponse = http2.Http2ServerResponse | ServerResponse;

/** Takes a request whose path is its own (true), or leaves it to the next handler (false). */
export type FrontDoor = (req: HttpRequest, res: HttpResponse, correlationId: string) => boolean;

/** The OpenAI API's paths. */
export const isOpenAiPath = (url: string | undefined): boolean => (url ?? "").startsWith("/v1/");

/** A request's body, as the contract bounds an invoke's payload. */
const maxBodyBytes = MAX_INVOKE_PAYLOAD_BYTES;
/** The most deployments /v1/models lists (a key's scope is bounded well below this). */
const maxModels = 1000;

export interface OpenAiDeps {
  keys: Pick<ServiceKeys, "authenticate">;
  relay: Pick<InvokeRelay, "invoke">;
  routes: Pick<DeploymentRoutes, "list">;
  log: Logger;
}

/** Why a request is cancelled when its response closed before it was all written: the client went away. */
const callerGone = new DOMException("the response closed", "AbortError");

/** A request whose client went away: logged as the client's, and not answered (there is no one to answer). */
const callerLeft = openAiFailure(499, "the client went away", "canceled", "canceled");

/** Before the database is open: every OpenAI path answers 503, in OpenAI's shape. */
export function startingFrontDoor(): FrontDoor {
  return (req, res) => {
    if (!isOpenAiPath(req.url)) return false;
    answer(
      req,
      res,
      openAiFailure(503, "control plane starting: database not ready", "service_unavailable", "service_unavailable", null, 1),
    );
    return true;
  };
}

export function openAiFrontDoor(deps: OpenAiDeps): FrontDoor {
  return (req, res, correlationId) => {
    if (!isOpenAiPath(req.url)) return false;
    const caller = new Cancel();
    // Not after a whole answer: the relay has let go of the signal by then, and an abort builds
    // and dispatches an Event for nobody. writableEnded (we called end), not writableFinished: an
    // HTTP/2 response whose client reset it reads as finished.
    res.once("close", () => {
      if (!res.writableEnded) caller.abort(callerGone);
    });
    serve(deps, req, res, correlationId, caller).then(
      (failure) => {
        if (failure !== undefined) fail(deps.log, req, res, correlationId, failure);
      },
      // Whatever failed once the client had gone (a write to its closed stream) is its doing.
      (err: unknown) => fail(deps.log, req, res, correlationId, caller.aborted ? callerLeft : openAiFailureOf(err), err),
    );
    return true;
  };
}

/** Answers the request, or says what to answer instead. */
async function serve(
  deps: OpenAiDeps,
  req: HttpRequest,
  res: HttpResponse,
  correlationId: string,
  signal: Cancel,
): Promise<OpenAiFailure | undefined> {
  const path = (req.url ?? "").split("?", 1)[0]!;
  const endpoint = endpointOf(req.method ?? "", path);
  if ("status" in endpoint) return endpoint;
  const principal = await authenticate(deps.keys, req);
  if (endpoint.kind === "models") return listModels(deps.routes, principal, res);
  const body = await readBody(req);
  if ("status" in body) return body;
  const request = generateRequestOf(body);
  if ("status" in request) return request;
  const call = {
    deployment: request.model,
    contentType: "application/json",
    payload: request.payload,
    body: request.body,
    timeoutMs: undefined,
    api: endpoint.api,
    stream: request.stream,
    requestId: correlationId,
    signal,
    credential: headerValue(req.headers.authorization),
    abandon: abandonerOf(req as Parameters<typeof abandonerOf>[0]),
    ...(request.stream ? { whileHeld: () => keepAlive(res) } : {}),
  };
  const pieces = deps.relay.invoke(principal, call);
  if (request.stream) return stream(pieces, request, res);
  return unary(pieces, request, res).catch((err: unknown) => {
    if (endpoint.api === InvokeApi.EMBEDDINGS && err instanceof ConnectError && err.code === Code.Unimplemented) {
      return embeddingsUnsupported(err.rawMessage);
    }
    throw err;
  });
}

/** The service key, and no other credential: a node's certificate or an operator key is refused (403). */
async function authenticate(keys: OpenAiDeps["keys"], req: HttpRequest): Promise<ServicePrincipal> {
  const peer = peerOf(req.socket as TLSSocket);
  refuseForeignCredentials({
    certificatePresented: peer.certificate !== undefined || peer.certificateError !== undefined,
    adminToken: headerValue(req.headers[adminTokenHeader]) ?? null,
  });
  const secret = bearerServiceKey(headerValue(req.headers.authorization));
  if (secret === undefined) throw new ConnectError('a service key is required: "Authorization: Bearer mfsk_..."', Code.Unauthenticated);
  return keys.authenticate(secret);
}

async function listModels(routes: OpenAiDeps["routes"], principal: ServicePrincipal, res: HttpResponse): Promise<undefined> {
  const targets = await routes.list([...principal.deployments].sort(), 0, maxModels);
  const data = targets.map((t) => ({ id: t.name, object: "model", created: Math.floor(t.createdAt / 1000), owned_by: "modelforge" }));
  sendJson(res, 200, JSON.stringify({ object: "list", data }));
  return undefined;
}

/** A deployment whose engine (or node) serves no embeddings: 400, as OpenAI answers a model without the endpoint. */
function embeddingsUnsupported(why: string): OpenAiFailure {
  return openAiFailure(400, why, "invalid_request_error", "embeddings_unsupported", "model");
}

async function unary(pieces: AsyncGenerator<AnswerPiece>, request: GenerateRequest, res: HttpResponse): Promise<undefined> {
  const parts: AnswerPiece[] = [];
  for await (const piece of pieces) parts.push(piece);
  // An answer in one piece was read by the relay already; one in several is read whole here.
  const answer = renamed(parts.length === 1 ? parts[0]! : { payload: Buffer.concat(parts.map((p) => p.payload)) }, request.model);
  if (answer === undefined)
    throw new ConnectError(`deployment ${request.model}'s runtime answered something other than JSON`, Code.Internal);
  sendJson(res, 200, answer);
  return undefined;
}

const eventStream = { "content-type": "text/event-stream", "cache-control": "no-cache" };

/**
 * A request held while a replica loads: an SSE comment, which clients ignore, so that proxies and
 * load balancers see the connection is alive. The first one sends the stream's headers.
 */
function keepAlive(res: HttpResponse): void {
  if (res.writableEnded || res.destroyed) return;
  if (!res.headersSent) res.writeHead(200, eventStream);
  (res as ServerResponse).write(": waiting for a replica to load\n\n");
}

/**
 * Server-sent events as OpenAI frames them. Nothing is written before the runtime's first chunk
 * (or a held request's first keep-alive), so a refusal before it (no replica, limits, a runtime's
 * 4xx) is an ordinary error status; after it a failure can only be told in the stream, as OpenAI
 * does, and the stream then ends without [DONE].
 */
async function stream(pieces: AsyncGenerator<AnswerPiece>, request: GenerateRequest, res: HttpResponse): Promise<undefined> {
  try {
    for await (const piece of pieces) {
      const chunk = renamed(piece, request.model);
      if (chunk === undefined) throw new ConnectError(`deployment ${request.model}'s runtime sent a chunk that is not JSON`, Code.Internal);
      if (!res.headersSent) res.writeHead(200, eventStream);
      // The next piece is taken only once this one is on its way: what the client has not read
      // waits in the relay's outbox, which bounds it, not in this response's buffer, which would not.
      if (!(res as ServerResponse).write(`data: ${chunk}\n\n`) && !(await drained(res))) return undefined;
    }
  } catch (err) {
    if (!res.headersSent) throw err;
    if (!res.writableEnded && !res.destroyed) res.end(`data: ${JSON.stringify(openAiFailureOf(err).body)}\n\n`);
    return undefined;
  }
  if (!res.headersSent) res.writeHead(200, eventStream);
  res.end("data: [DONE]\n\n");
  return undefined;
}

/**
 * The body, bounded; 413 without reading on when it declares or reaches more. Read by its events,
 * not an async iterator: the iterator's stream plumbing cost more per request than the body's bytes.
 */
function readBody(req: HttpRequest): Promise<Uint8Array | OpenAiFailure> {
  const tooLarge = () =>
    openAiFailure(413, `the request body is over the limit of ${maxBodyBytes} bytes`, "invalid_request_error", "request_too_large");
  const declared = declaredLength(req);
  if (declared !== undefined && declared > maxBodyBytes) return Promise.resolve(tooLarge());
  // Gone while its key was checked: no event would come to say so.
  if (req.destroyed || ("stream" in req && req.stream.destroyed)) return Promise.resolve(callerLeft);
  return new Promise((resolve) => {
    const chunks: Buffer[] = [];
    let bytes = 0;
    const settle = (result: Uint8Array | OpenAiFailure) => {
      req.off("data", onData);
      req.off("end", onEnd);
      req.off("error", onGone);
      req.off("aborted", onGone);
      req.off("close", onGone);
      resolve(result);
    };
    const onData = (chunk: Buffer) => {
      bytes += chunk.byteLength;
      if (bytes > maxBodyBytes) {
        // Not read on: what is left is drained (or the connection closed) by the failure's answer.
        req.pause();
        return settle(tooLarge());
      }
      chunks.push(chunk);
    };
    const onEnd = () => settle(chunks.length === 1 ? chunks[0]! : Buffer.concat(chunks));
    // The client's doing: it reset the stream or closed the connection mid-body, or sent a body
    // HTTP/1.1's parser refused (Node answers that one 400 itself). Nothing of ours failed.
    // Closed before its end: an HTTP/2 request reads as complete once reset, so its state is no guide.
    const onGone = () => settle(callerLeft);
    req.on("data", onData);
    req.once("end", onEnd);
    req.once("error", onGone);
    req.once("aborted", onGone);
    req.once("close", onGone);
  });
}

function fail(log: Logger, req: HttpRequest, res: HttpResponse, correlationId: string, failure: OpenAiFailure, err?: unknown): void {
  const path = (req.url ?? "").split("?", 1)[0]!.slice(0, 128);
  // Our own faults at error level; what a caller caused (or a node refused) at debug.
  if (failure.status === 500)
    log.error({ correlationId, method: req.method, path, status: failure.status, error: (err as Error)?.message }, "openai request failed");
  else
    log.debug({ correlationId, method: req.method, path, status: failure.status, code: failure.body.error.code }, "openai request refused");
  if (failure.status === 499) return;
  answer(req, res, failure);
}

/**
 * A failure answered once the rest of the body is read and discarded (bounded: see
 * ../edge/drain.ts for why a refused body is not simply reset), so it ends its own stream only;
 * HTTP/1.1 closes the connection if the body could not be read to its end.
 */
function answer(req: HttpRequest, res: HttpResponse, failure: OpenAiFailure): void {
  if (req.complete) return send(res, failure);
  answerAfterBody(req, res, () => {
    if (!("stream" in req) && !req.complete && !res.headersSent) res.setHeader("connection", "close");
    send(res, failure);
  });
}

function send(res: HttpResponse, failure: OpenAiFailure): void {
  if (res.headersSent || res.writableEnded || res.destroyed) return;
  if (failure.retryAfter !== undefined) res.setHeader("retry-after", String(failure.retryAfter));
  sendJson(res, failure.status, JSON.stringify(failure.body));
}

/** With its length: without one, a body after writeHead goes out chunked (more to write and to parse). */
function sendJson(res: HttpResponse, status: number, body: string): void {
  res.writeHead(status, { "content-type": "application/json", "content-length": Buffer.byteLength(body) });
  res.end(body);
}
