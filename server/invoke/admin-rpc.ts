// AdminService.WatchDeploymentLogs (the admin token is checked by the interceptor before it runs).
import { create } from "@bufbuild/protobuf";
import { Code, ConnectError, type ServiceImpl } from "@connectrpc/connect";
import { WatchDeploymentLogsResponseSchema, type AdminService } from "../../gen/proto/modelforge/admin/v1/admin_pb.js";
import type { LogWatches } from "./logs.js";
import type { DeploymentRoutes } from "./routes.js";

type LogRpcs = Pick<ServiceImpl<typeof AdminService>, "watchDeploymentLogs">;

/** Lines shown first when the request names no tail; and the most it may name. */
const defaultTail = 100;
const maxTail = 1000;

export function adminDeploymentLogs(deps: { routes: DeploymentRoutes; logs: LogWatches; shutdown: AbortSignal }): LogRpcs {
  return {
    async *watchDeploymentLogs(req, ctx) {
      const target = await deps.routes.find(req.deploymentId);
      if (target === undefined) throw new ConnectError(`no deployment ${req.deploymentId}`, Code.NotFound);
      const nodeIds = req.nodeId !== "" ? [req.nodeId] : [...new Set(target.ready.map((i) => i.nodeId))];
      if (nodeIds.length === 0) throw new ConnectError(`no node serves deployment ${target.name} now`, Code.FailedPrecondition);
      const tail = req.tailLines === 0 ? defaultTail : Math.min(req.tailLines, maxTail);
      const signal = AbortSignal.any([ctx.signal, deps.shutdown]);
      for await (const batch of deps.logs.follow(target.deploymentId, nodeIds, tail, signal)) {
        yield create(WatchDeploymentLogsResponseSchema, { nodeId: batch.nodeId, lines: batch.lines, droppedLines: batch.droppedLines });
      }
    },
  };
}
