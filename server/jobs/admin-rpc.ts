// The job RPCs of modelforge.admin.v1.AdminService: create, show, list, cancel. Merged into the
// admin service by ./admin.ts; the admin token is checked by the interceptor before these run.
import { Code, ConnectError, type HandlerContext, type ServiceImpl } from "@connectrpc/connect";
import { create, toBinary } from "@bufbuild/protobuf";
import {
  type AdminService,
  CancelJobResponseSchema,
  CreateJobResponseSchema,
  GetJobResponseSchema,
  JobSchema,
  ListJobsResponseSchema,
} from "../../gen/proto/modelforge/admin/v1/admin_pb.js";
import type { Prisma, PrismaClient } from "../../gen/prisma/client.js";
import { callOf } from "../context.js";
import { actorIn } from "../identity/operators/principal.js";
import type { JobEngine } from "./engine.js";
import { jobStateFromProto, jobToProto } from "./codec.js";
import { jobIdOf } from "./errors.js";
import { countWithin, decodeSeq, encodePageToken, pageSizeOf, splitPage } from "../rpc/paging.js";

/** The most bytes of jobs one ListJobs page holds (at least one job, whatever its size). */
export const MAX_LIST_PAGE_BYTES = 4 * 1024 * 1024;

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
        by: actorIn(ctx),
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
      const { page } = splitPage(rows, size);
      const jobs = page.map(jobToProto);
      // A job carries its spec and result (up to a whole commit's files each): the page ends
      // early rather than grow with them; the next page starts after its last job.
      const held = countWithin(
        jobs.map((j) => toBinary(JobSchema, j).byteLength),
        MAX_LIST_PAGE_BYTES,
      );
      return create(ListJobsResponseSchema, {
        jobs: jobs.slice(0, held),
        nextPageToken: rows.length > held ? encodePageToken(String(page[held - 1]!.seq)) : "",
      });
    },
    async cancelJob(req, ctx) {
      const job = await engine.cancelJob(req.jobId, req.reason, correlation(ctx), actorIn(ctx));
      return create(CancelJobResponseSchema, { job: jobToProto(job) });
    },
  };
}
