// Job rows to messages and back. Typed payloads (spec, result, failure, progress) are stored as
// protobuf JSON in the Json columns, so they stay readable in the database and survive proto
// evolution (unknown fields are ignored on the way back).
import { create, fromJson, toJson, type JsonValue } from "@bufbuild/protobuf";
import { timestampFromMs } from "@bufbuild/protobuf/wkt";
import type { Job as JobRow, Prisma } from "../../gen/prisma/client.js";
import {
  JobFailureCode,
  JobFailureSchema,
  JobLeaseSchema,
  JobProgressSchema,
  JobResultSchema,
  JobSpecSchema,
  type JobFailure,
  type JobLease,
  type JobSpec,
} from "../../gen/proto/modelforge/jobs/v1/jobs_pb.js";
import { JobSchema, JobState as JobStateEnum, type Job as JobMessage } from "../../gen/proto/modelforge/admin/v1/admin_pb.js";
import type { JobRecord, JobState, LeaseCandidate } from "./lease.js";
import { ts } from "../rpc/convert.js";

const readOptions = { ignoreUnknownFields: true };

export const specFromJson = (json: unknown): JobSpec => fromJson(JobSpecSchema, json as JsonValue, readOptions);

export function failureJson(code: JobFailureCode, message: string, retryable: boolean): Prisma.InputJsonValue {
  return toJson(JobFailureSchema, create(JobFailureSchema, { code, message, retryable })) as Prisma.InputJsonValue;
}
export const failureToJson = (f: JobFailure) => toJson(JobFailureSchema, f) as Prisma.InputJsonValue;

/** The proto enum value of a failure code named in ./lease.ts (e.g. "ATTEMPTS_EXHAUSTED"). */
export function failureCodeOf(name: keyof typeof JobFailureCode): JobFailureCode {
  return JobFailureCode[name];
}

const stateEnum: Record<JobState, JobStateEnum> = {
  pending: JobStateEnum.PENDING,
  leased: JobStateEnum.LEASED,
  succeeded: JobStateEnum.SUCCEEDED,
  failed: JobStateEnum.FAILED,
  cancelled: JobStateEnum.CANCELLED,
};
export const jobStateToProto = (s: string): JobStateEnum => stateEnum[s as JobState] ?? JobStateEnum.UNSPECIFIED;
export function jobStateFromProto(s: JobStateEnum): JobState | undefined {
  return (Object.keys(stateEnum) as JobState[]).find((k) => stateEnum[k] === s);
}

/** The fields of a row the pure lease rules look at. */
export function recordOf(
  row: Pick<JobRow, "state" | "attempt" | "maxAttempts" | "leaseExpiresAt" | "cancelRequested" | "orderingKey" | "seq">,
): JobRecord {
  return {
    state: row.state as JobState,
    attempt: row.attempt,
    maxAttempts: row.maxAttempts,
    leaseExpiresAt: row.leaseExpiresAt?.getTime() ?? null,
    cancelRequested: row.cancelRequested,
    orderingKey: row.orderingKey,
    seq: row.seq,
  };
}

export function candidateOf(row: Parameters<typeof recordOf>[0] & { id: string }): LeaseCandidate {
  return { ...recordOf(row), id: row.id };
}

export function jobToProto(row: JobRow): JobMessage {
  return create(JobSchema, {
    id: row.id,
    nodeId: row.nodeId,
    capability: row.capability,
    spec: specFromJson(row.spec),
    state: jobStateToProto(row.state),
    orderingKey: row.orderingKey ?? "",
    attempt: row.attempt,
    maxAttempts: row.maxAttempts,
    leaseExpiresAt: row.state === "leased" ? ts(row.leaseExpiresAt) : undefined,
    progress: row.progress !== null ? fromJson(JobProgressSchema, row.progress as JsonValue, readOptions) : undefined,
    result: row.result !== null ? fromJson(JobResultSchema, row.result as JsonValue, readOptions) : undefined,
    failure: row.failure !== null ? fromJson(JobFailureSchema, row.failure as JsonValue, readOptions) : undefined,
    cancelRequested: row.cancelRequested,
    createdAt: ts(row.createdAt),
    updatedAt: ts(row.updatedAt),
    finishedAt: ts(row.finishedAt),
  });
}

/** The lease of a job's current attempt; `spec` is the stored JSON or the message itself. */
export function leaseOf(job: { id: string; attempt: number; leaseExpiresAt: number; spec: unknown; orderingKey: string | null }): JobLease {
  const spec = isSpecMessage(job.spec) ? job.spec : specFromJson(job.spec);
  return create(JobLeaseSchema, {
    jobId: job.id,
    attempt: job.attempt,
    expiresAt: timestampFromMs(job.leaseExpiresAt),
    spec,
    orderingKey: job.orderingKey ?? "",
  });
}

function isSpecMessage(value: unknown): value is JobSpec {
  return typeof value === "object" && value !== null && (value as { $typeName?: unknown }).$typeName === JobSpecSchema.typeName;
}
