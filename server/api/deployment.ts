// modelforge.deployment.v1.DeploymentService: Invoke, InvokeStream and ListDeployments for a
// service key (authenticated by server/identity/service-keys-auth.ts before these run).
import { create } from "@bufbuild/protobuf";
import type { HandlerContext, ServiceImpl } from "@connectrpc/connect";
import {
  DeploymentSchema,
  DeploymentState,
  InvokeResponseSchema,
  InvokeStreamResponseSchema,
  ListDeploymentsResponseSchema,
  type DeploymentService,
} from "../../gen/proto/modelforge/deployment/v1/deployment_pb.js";
import { callOf } from "../context.js";
import { serviceKeyHeader, servicePrincipalOf } from "../identity/service-keys-auth.js";
import { forwardedFromHeader } from "../invoke/forward.js";
import { decodeOffset, encodePageToken, pageSizeOf, splitPage } from "../rpc/paging.js";
import type { InvokeRelay, InvokeCall } from "../invoke/relay.js";
import { callerWaitMs, requestedTimeoutMs } from "../invoke/rules.js";
import type { DeploymentPhase, DeploymentRoutes, DeploymentTarget } from "../invoke/routes.js";

const stateOf: Record<DeploymentPhase, DeploymentState> = {
  PENDING: DeploymentState.PENDING,
  DEGRADED: DeploymentState.DEGRADED,
  LOADING: DeploymentState.LOADING,
  READY: DeploymentState.READY,
  DRAINING: DeploymentState.DRAINING,
  UNLOADED: DeploymentState.UNLOADED,
  FAILED: DeploymentState.FAILED,
};

const toProto = (t: DeploymentTarget) =>
  create(DeploymentSchema, {
    id: t.deploymentId,
    name: t.name,
    nodeId: t.ready[0]?.nodeId ?? "",
    state: stateOf[t.phase],
    revision: t.ready[0]?.revision ?? 0n,
  });

export function deploymentService(relay: InvokeRelay, routes: DeploymentRoutes): ServiceImpl<typeof DeploymentService> {
  const callOfRequest = (
    req: {
      deploymentId: string;
      contentType: string;
      payload: Uint8Array;
      timeout?: Parameters<typeof requestedTimeoutMs>[0];
      api: number;
    },
    ctx: HandlerContext,
    stream: boolean,
  ): InvokeCall => ({
    deployment: req.deploymentId,
    contentType: req.contentType,
    payload: req.payload,
    timeoutMs: callerWaitMs(requestedTimeoutMs(req.timeout), ctx.timeoutMs()),
    api: req.api,
    stream,
    requestId: callOf(ctx).correlationId,
    signal: ctx.signal,
    credential: ctx.requestHeader.get(serviceKeyHeader) ?? undefined,
    forwardedFrom: ctx.requestHeader.get(forwardedFromHeader) ?? undefined,
    abandon: callOf(ctx).abandon,
  });
  return {
    async invoke(req, ctx) {
      const principal = servicePrincipalOf(ctx);
      const parts: Uint8Array[] = [];
      let contentType = "application/json";
      let revision = 0n;
      let replica = 0;
      for await (const piece of relay.invoke(principal, callOfRequest(req, ctx, false))) {
        parts.push(piece.payload);
        contentType = piece.contentType;
        [revision, replica] = [piece.revision, piece.replica];
      }
      const payload = parts.length === 1 ? parts[0]! : Buffer.concat(parts);
      return create(InvokeResponseSchema, { contentType, payload, jobId: callOf(ctx).correlationId, revision, replica });
    },
    async *invokeStream(req, ctx) {
      const principal = servicePrincipalOf(ctx);
      let first = true;
      for await (const piece of relay.invoke(principal, callOfRequest(req, ctx, true))) {
        yield create(InvokeStreamResponseSchema, {
          contentType: piece.contentType,
          payload: piece.payload,
          revision: first ? piece.revision : 0n,
          replica: first ? piece.replica : 0,
        });
        first = false;
      }
    },
    async listDeployments(req, ctx) {
      const principal = servicePrincipalOf(ctx);
      const size = pageSizeOf(req.pageSize);
      const offset = decodeOffset(req.pageToken);
      const { page, more } = splitPage(await routes.list([...principal.deployments].sort(), offset, size + 1), size);
      return create(ListDeploymentsResponseSchema, {
        deployments: page.map(toProto),
        nextPageToken: more ? encodePageToken(String(offset + size)) : "",
      });
    },
  };
}
