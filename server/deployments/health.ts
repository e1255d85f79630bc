// CheckDeploymentHealth: one deployment.health.v1 job per loaded revision, answered when the node
// answered them all or the wait ran out. Not on the deployment's ordering key: a health check
// must not queue behind a long drain.
import { Code, ConnectError } from "@connectrpc/connect";
import type { Job, PrismaClient } from "../../gen/prisma/client.js";
import { create } from "@bufbuild/protobuf";
import { JobSpecSchema } from "../../gen/proto/modelforge/jobs/v1/jobs_pb.js";
import type { CreateJobInput } from "../jobs/create.js";
import { findRecord } from "./desired.js";
import { failureText } from "./rules.js";

export interface HealthDeps {
  prisma: PrismaClient;
  jobs: { createJob(input: CreateJobInput): Promise<Pick<Job, "id">> };
}

export interface RevisionHealth {
  revision: bigint;
  nodeId: string;
  answered: boolean;
  healthy: boolean;
  detail: string;
  jobId: string;
}

export const DEFAULT_HEALTH_WAIT_MS = 10_000;
export const MAX_HEALTH_WAIT_MS = 60_000;
const POLL_MS = 100;

/** The answer a finished (or unfinished) health job gives. Pure. */
export function healthOf(job: Pick<Job, "state" | "result" | "failure">): Pick<RevisionHealth, "answered" | "healthy" | "detail"> {
  if (job.state === "succeeded") {
    const health = (job.result as { deploymentHealth?: { healthy?: boolean; detail?: string } } | null)?.deploymentHealth;
    return { answered: true, healthy: health?.healthy === true, detail: health?.detail ?? "" };
  }
  if (job.state === "failed" || job.state === "cancelled") {
    return { answered: true, healthy: false, detail: failureText(job.failure as { code?: string; message?: string } | null) };
  }
  return { answered: false, healthy: false, detail: "the node did not answer in time" };
}

export async function checkHealth(
  deps: HealthDeps,
  idOrName: string,
  waitMs: number,
  correlationId: string,
  signal: AbortSignal,
): Promise<RevisionHealth[]> {
  if (waitMs > MAX_HEALTH_WAIT_MS) throw new ConnectError("wait: at most 60 s", Code.InvalidArgument);
  const d = await findRecord(deps.prisma, idOrName);
  const loaded = d.instances.filter(
    (i): i is typeof i & { nodeId: string } => i.nodeId !== null && (i.phase === "ready" || i.phase === "draining"),
  );
  const jobs = await Promise.all(
    loaded.map((i) =>
      deps.jobs.createJob({
        nodeId: i.nodeId,
        spec: create(JobSpecSchema, { kind: { case: "deploymentHealth", value: { deploymentId: d.id, revision: i.revision } } }),
        orderingKey: "",
        maxAttempts: 1,
        correlationId,
      }),
    ),
  );
  const ids = jobs.map((j) => j.id);
  // Real time on purpose: this bounds how long an operator's call waits, not a rule of the system.
  const deadline = Date.now() + waitMs;
  let rows: Pick<Job, "id" | "state" | "result" | "failure">[] = [];
  for (;;) {
    rows = await deps.prisma.job.findMany({ where: { id: { in: ids } }, select: { id: true, state: true, result: true, failure: true } });
    const done = rows.every((r) => r.state !== "pending" && r.state !== "leased");
    if (done || Date.now() >= deadline || signal.aborted) break;
    await new Promise((resolve) => setTimeout(resolve, POLL_MS));
  }
  const byId = new Map(rows.map((r) => [r.id, r]));
  return loaded.map((i, n) => ({
    revision: i.revision,
    nodeId: i.nodeId,
    jobId: ids[n]!,
    ...healthOf(byId.get(ids[n]!) ?? { state: "pending", result: null, failure: null }),
  }));
}
