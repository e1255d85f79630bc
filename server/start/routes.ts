// The Connect adapters behind the listener: the routes that need no database (served from the
// moment the port opens), then every service with the interceptors in their order.
import type { TLSSocket } from "node:tls";
import { connectNodeAdapter, type ConnectNodeAdapterOptions } from "@connectrpc/connect-node";
import { createContextValues, type Interceptor, type ServiceImpl } from "@connectrpc/connect";
import type { Logger } from "../observability/logger.js";
import { correlationIdFrom } from "../observability/correlation.js";
import { callLogInterceptor } from "../observability/call-log.js";
import type { ServerMetrics } from "../observability/metrics.js";
import type { OutageSink } from "../db/availability.js";
import { abandonerOf, callerKey, peerOf, type Caller } from "../context.js";
import type { Ca } from "../identity/pki/ca.js";
import { validationInterceptor } from "../edge/validate.js";
import { undecodableAsInvalidArgument } from "../edge/decode-errors.js";
import { edgeAdapterOptions } from "../edge/guard.js";
import { HealthState, healthService } from "../api/health.js";
import { serverInfo } from "../api/agent.js";
import { ReflectionIndex, reflectionServices, routeReflection } from "../reflection/reflection.js";
import { Health } from "../../gen/proto/grpc/health/v1/health_pb.js";
import { AgentService } from "../../gen/proto/modelforge/agent/v1/agent_pb.js";
import { AdminService } from "../../gen/proto/modelforge/admin/v1/admin_pb.js";
import { DeploymentService } from "../../gen/proto/modelforge/deployment/v1/deployment_pb.js";
import type { RequestHandler } from "./listener.js";

/** What both stages serve alike: health, and reflection of the public contract only. */
export function publicFace() {
  return {
    health: new HealthState([AgentService.typeName, AdminService.typeName, DeploymentService.typeName]),
    reflection: new ReflectionIndex([AgentService, AdminService, DeploymentService, Health, ...reflectionServices]),
  };
}
type PublicFace = ReturnType<typeof publicFace>;

/** Health, GetServerInfo and reflection; everything else answers 503 until the database is open. */
export function startingRoutes(face: PublicFace, deps: { ca: Ca; minAgentVersion: string; log: Logger }): RequestHandler {
  return handlerOf(
    connectNodeAdapter({
      routes: (router) => {
        router.service(Health, healthService(face.health));
        router.rpc(AgentService.method.getServerInfo, () => serverInfo(deps.ca, deps.minAgentVersion));
        routeReflection(router, face.reflection);
        undecodableAsInvalidArgument(router);
      },
      interceptors: [callLogInterceptor()],
      contextValues: contextValuesOf(deps.log),
      ...edgeAdapterOptions,
      fallback: (_req, res) => {
        // Retry-After: agents come back this soon instead of backing off as from a dead server.
        res.writeHead(503, { "content-type": "application/json", "retry-after": "1" });
        res.end(JSON.stringify({ code: "unavailable", message: "control plane starting: database not ready" }));
      },
    }),
  );
}

export interface ServicesDeps {
  log: Logger;
  outage: OutageSink;
  /** Authenticates and authorizes every operator call (server/identity/operators/interceptor.ts). */
  operatorInterceptor: Interceptor;
  serviceKeyInterceptor: Interceptor;
  metrics: ServerMetrics | undefined;
  agent: ServiceImpl<typeof AgentService>;
  admin: ServiceImpl<typeof AdminService>;
  deployment: ServiceImpl<typeof DeploymentService>;
}

/** Every service, once the database is open. */
export function servingRoutes(face: PublicFace, deps: ServicesDeps): RequestHandler {
  return handlerOf(
    connectNodeAdapter({
      routes: (router) => {
        router.service(Health, healthService(face.health));
        router.service(AgentService, deps.agent);
        router.service(AdminService, deps.admin);
        router.service(DeploymentService, deps.deployment);
        routeReflection(router, face.reflection);
        undecodableAsInvalidArgument(router);
      },
      interceptors: [
        callLogInterceptor(deps.outage),
        deps.serviceKeyInterceptor,
        ...(deps.metrics ? [deps.metrics.interceptor()] : []),
        deps.operatorInterceptor,
        validationInterceptor(),
      ],
      contextValues: contextValuesOf(deps.log),
      ...edgeAdapterOptions,
    }),
  );
}

const correlationSymbol = Symbol("correlationId");

/** The adapter, told the request's correlation id (chosen by the listener) through the request itself. */
function handlerOf(adapter: ReturnType<typeof connectNodeAdapter>): RequestHandler {
  return (req, res, correlationId) => {
    (req as unknown as Record<symbol, string>)[correlationSymbol] = correlationId;
    res.once("close", () => releaseDrainWaiters(res));
    adapter(req, res);
  };
}

/**
 * Connect's handler writes a streamed answer and, when the write says the buffer is full, waits
 * for "drain" or "error". An HTTP/2 stream the peer resets with CANCEL while that write is queued
 * closes with neither, and its write callback may never be called: the handler, and the call's
 * log line, then waited for good (seen at the holder of a forwarded stream cancelled mid-answer
 * on a busy machine). A closed response can take nothing more, so whoever waits to write is told
 * to go on; the next write fails at once and the handler ends as cancelled.
 */
function releaseDrainWaiters(res: { listenerCount(event: string): number; emit(event: string): boolean }): void {
  if (res.listenerCount("drain") > 0) res.emit("drain");
}

function contextValuesOf(log: Logger): ConnectNodeAdapterOptions["contextValues"] {
  return (req) => {
    const correlationId = (req as unknown as Record<symbol, string>)[correlationSymbol] ?? correlationIdFrom(undefined);
    return createContextValues().set(callerKey, callerOf(req, correlationId, log));
  };
}

function callerOf(
  req: Parameters<typeof abandonerOf>[0] & { socket: unknown; headers: Record<string, string | string[] | undefined> },
  correlationId: string,
  log: Logger,
): Caller {
  const host = req.headers[":authority"] ?? req.headers.host;
  return {
    correlationId,
    log: log.child({ correlationId }),
    ...peerOf(req.socket as TLSSocket),
    host: typeof host === "string" ? host : undefined,
    abandon: abandonerOf(req),
  };
}
