// The job RPCs of modelforge.admin.v1.AdminService: create, show, list, cancel. Merged into the
// admin service by ./admin.ts; the admin token is checked by the interceptor before these run.
import { Code, ConnectError, type HandlerContext, type ServiceImpl } from "@connectrpc/connect";
import { create } from "@bufbuild/protobuf";
import {
  type AdminService,
  CancelJobResponseSchema,
  CreateJobResponseSchema,
  GetJobResponseSchema,
  ListJobsResponseSchema,
} from "../../gen/proto/modelforge/admin/v1/admin_pb.js";
import type { Prisma, PrismaClient } from "../../gen/prisma/client.js";
import { callOf } from "../context.js";
import type { JobEngine } from "./engine.js";
import { jobStateFromProto, jobToProto } from "./codec.js";
import { jobIdOf } from "./errors.js";
import { decodeSeq, encodePageToken, pageSizeOf, splitPage } from "../rpc/paging.js";

type JobRpcs = Pick<ServiceImpl<typeof AdminService>, "createJob" | "getJob" | "listJobs" | "cancelJob">;

export function adminJobs(deps: { prisma: PrismaClient; engine: JobEngine }): JobRpcs {
  const { engine, prisma } = deps;
  const correlation = (ctx: HandlerContext) => callOf(ctx).correlationId;

  return {
    async createJob(req, ctx) {
      const job = await engine.createJob({
        nodeId: req.nodeId,
        spec: req.spec,
        orderingKey: req.orderingKey,
        maxAttempts: req.maxAttempts,
        correlationId: correlation(ctx),
      });
      return create(CreateJobResponseSchema, { job: jobToProto(job) });
    },
    async getJob(req) {
      const id = jobIdOf(req.jobId);
      const job = await prisma.job.findUnique({ where: { id } });
      if (job === null) throw new ConnectError(`job ${id} not found`, Code.NotFound);
      return create(GetJobResponseSchema, { job: jobToProto(job) });
    },
    async listJobs(req) {
      const size = pageSizeOf(req.pageSize);
      const before = decodeSeq(req.pageToken);
      const states = req.states.map((s) => {
        const state = jobStateFromProto(s);
        if (state === undefined) throw new ConnectError(`states: ${s} is not a job state`, Code.InvalidArgument);
        return state;
      });
      const where: Prisma.JobWhereInput = {
        ...(before !== undefined ? { seq: { lt: before } } : {}),
        ...(req.nodeId ? { nodeId: jobIdOf(req.nodeId, "node_id") } : {}),
        ...(states.length > 0 ? { state: { in: states } } : {}),
        ...(req.orderingKey ? { orderingKey: req.orderingKey } : {}),
      };
      const rows = await prisma.job.findMany({ where, orderBy: { seq: "desc" }, take: size + 1 });
      const { page, more } = splitPage(rows, size);
      return create(ListJobsResponseSchema, {
        jobs: page.map(jobToProto),
        nextPageToken: more ? encodePageToken(String(page[page.length - 1]!.seq)) : "",
      });
    },
    async cancelJob(req, ctx) {
      const job = await engine.cancelJob(req.jobId, req.reason, correlation(ctx));
      return create(CancelJobResponseSchema, { job: jobToProto(job) });
    },
  };
}
