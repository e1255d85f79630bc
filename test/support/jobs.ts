// A job through the admin API, to its end: created for one node with a single attempt, then
// polled until it succeeded, failed or was cancelled.
import type { MessageInitShape } from "@bufbuild/protobuf";
import type { Client } from "@connectrpc/connect";
import { JobState, type AdminService, type Job } from "../../gen/proto/modelforge/admin/v1/admin_pb.js";
import type { JobSpecSchema } from "../../gen/proto/modelforge/jobs/v1/jobs_pb.js";
import { eventually } from "./node.js";

const ended = [JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELLED];

export async function jobToEnd(
  admin: Client<typeof AdminService>,
  nodeId: string,
  spec: MessageInitShape<typeof JobSpecSchema>,
  timeoutMs: number,
): Promise<Job> {
  const { job } = await admin.createJob({ nodeId, spec, maxAttempts: 1 });
  const jobId = job!.id;
  return eventually(
    async () => {
      const j = (await admin.getJob({ jobId })).job!;
      return ended.includes(j.state) ? j : undefined;
    },
    timeoutMs,
    `job ${jobId} to finish`,
  );
}
