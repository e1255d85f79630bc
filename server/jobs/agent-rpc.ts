// The job RPCs of modelforge.agent.v1.AgentService, for agents without a session (or curl):
// ClaimJob, ReportJobProgress, CompleteJob, FailJob. They run the same engine functions as the
// Session's job messages, after the same node authentication as every node RPC.
import type { HandlerContext, ServiceImpl } from "@connectrpc/connect";
import type { AgentService } from "../../gen/proto/modelforge/agent/v1/agent_pb.js";
import type { PrismaClient } from "../../gen/prisma/client.js";
import type { Clock } from "../../common/clock.js";
import { authenticateNode } from "../identity/node-auth.js";
import { callOf } from "../context.js";
import type { JobEngine } from "./engine.js";

type JobRpcs = Pick<ServiceImpl<typeof AgentService>, "claimJob" | "reportJobProgress" | "completeJob" | "failJob">;

export function agentJobs(deps: { prisma: PrismaClient; clock: Clock; engine: JobEngine }): JobRpcs {
  const { engine } = deps;
  const nodeOf = async (ctx: HandlerContext) => (await authenticateNode(deps.prisma, ctx, deps.clock)).node.id;

  return {
    async claimJob(_req, ctx) {
      return engine.claimJob(await nodeOf(ctx));
    },
    async reportJobProgress(req, ctx) {
      return engine.reportProgress(await nodeOf(ctx), req);
    },
    async completeJob(req, ctx) {
      return engine.completeJob(await nodeOf(ctx), req, callOf(ctx).correlationId);
    },
    async failJob(req, ctx) {
      return engine.failJob(await nodeOf(ctx), req, callOf(ctx).correlationId);
    },
  };
}
