// Creating a job: validation of the spec and its node, the insert (with its audit event), and
// the fast path that leases it in the same statement when its node is online with a session here.
import { randomUUID } from "node:crypto";
import { Code, ConnectError } from "@connectrpc/connect";
import { toJson } from "@bufbuild/protobuf";
import type { Job as JobRow, Prisma } from "../../gen/prisma/client.js";
import { JobSpecSchema, type JobSpec } from "../../gen/proto/modelforge/jobs/v1/jobs_pb.js";
import { capabilityOfSpec } from "../../common/capabilities.js";
import { systemActor, type AuditActor } from "../audit/audit.js";
import { validateJobSpec } from "./spec.js";
import { engineOfSpec, withResolvedProfile } from "./profiles.js";
import { leaseExpiry } from "./lease.js";
import { leaseOf } from "./codec.js";
import type { JobWork } from "./work.js";
import { jobIdOf, validating } from "./errors.js";
import { insertJob } from "./sql.js";

type Tx = Prisma.TransactionClient;

const MAX_ORDERING_KEY = 256;

export interface CreateJobInput {
  /** A caller that claimed the id before creating the job (the deployment controller) gives it. */
  id?: string;
  nodeId: string;
  spec: JobSpec | undefined;
  orderingKey: string;
  /** 0: the configured default. */
  maxAttempts: number;
  correlationId: string;
  /** Who asked for it; unset: the control plane itself (a deployment's step). */
  by?: AuditActor;
}

/** The ordering key and attempt bound a request asks for, checked. */
function keyAndAttempts(input: CreateJobInput, defaultMaxAttempts: number): { orderingKey: string | null; maxAttempts: number } {
  const orderingKey = input.orderingKey === "" ? null : input.orderingKey;
  if (orderingKey !== null && (orderingKey.length > MAX_ORDERING_KEY || /[\u0000-\u001f\u007f]/.test(orderingKey))) {
    throw new ConnectError(`ordering_key: at most ${MAX_ORDERING_KEY} characters, no control characters`, Code.InvalidArgument);
  }
  const maxAttempts = input.maxAttempts === 0 ? defaultMaxAttempts : input.maxAttempts;
  if (!Number.isInteger(maxAttempts) || maxAttempts < 1 || maxAttempts > 100) {
    throw new ConnectError(`max_attempts: must be from 1 to 100 (0 for the default, ${defaultMaxAttempts})`, Code.InvalidArgument);
  }
  return { orderingKey, maxAttempts };
}

interface NodeFacts {
  id: string;
  disabledAt: Date | null;
  disabledReason: string | null;
  decommissionedAt: Date | null;
  capabilities: string[];
  engines: string[];
}

/** Refuses a node that may not take this job: decommissioned, disabled, or lacking its capability or engine. */
function checkNodeTakes(node: NodeFacts, capability: string, engine: string | undefined): void {
  if (node.decommissionedAt !== null) {
    throw new ConnectError(`node ${node.id} is decommissioned: it takes no jobs`, Code.FailedPrecondition);
  }
  if (node.disabledAt !== null) {
    throw new ConnectError(
      `node ${node.id} is disabled${node.disabledReason ? ` (${node.disabledReason})` : ""}: enable it before giving it jobs`,
      Code.FailedPrecondition,
    );
  }
  if (!node.capabilities.includes(capability)) {
    const has = node.capabilities.length > 0 ? node.capabilities.join(", ") : "none";
    throw new ConnectError(`node ${node.id} never advertised capability "${capability}"; it advertises: ${has}`, Code.FailedPrecondition);
  }
  if (engine !== undefined && !node.engines.includes(engine)) {
    const runs = node.engines.length > 0 ? node.engines.join(", ") : "none";
    throw new ConnectError(`node ${node.id} does not run engine "${engine}"; it runs: ${runs}`, Code.FailedPrecondition);
  }
}

/** What a job's creation reads of its node. */
const targetNodeColumns = {
  id: true,
  lastHeartbeatAt: true,
  disabledAt: true,
  disabledReason: true,
  decommissionedAt: true,
  capabilities: true,
  engines: true,
} as const;

/** The row just inserted, as the database now holds it: leased at once (its first attempt), or pending. */
function newJobRow(
  row: Pick<JobRow, "id" | "nodeId" | "capability" | "orderingKey" | "maxAttempts" | "leaseExpiresAt"> & { spec: unknown; now: Date },
  seq: JobRow["seq"],
  leased: boolean,
): JobRow {
  const { now, ...fields } = row;
  return {
    ...fields,
    seq,
    spec: row.spec as Prisma.JsonValue,
    state: leased ? "leased" : "pending",
    attempt: leased ? 1 : 0,
    progress: null,
    result: null,
    failure: null,
    cancelRequested: false,
    cancelReason: null,
    createdAt: now,
    updatedAt: now,
    finishedAt: null,
  };
}

export async function createJob(ctx: JobWork, input: CreateJobInput): Promise<JobRow> {
  const config = ctx.settings;
  if (input.spec === undefined) throw new ConnectError("spec: is required: exactly one capability must be set", Code.InvalidArgument);
  const requested = input.spec;
  validating(() => validateJobSpec(requested, { approvedRoots: config.approvedRoots }));
  const spec = await withResolvedProfile(requested, ctx.profiles);
  const capability = capabilityOfSpec(spec);
  const { orderingKey, maxAttempts } = keyAndAttempts(input, config.defaultMaxAttempts);
  const nodeId = jobIdOf(input.nodeId, "node_id");
  const create = async (tx: Pick<Tx, "node" | "job" | "$queryRaw">): Promise<JobRow> => {
    const node = await tx.node.findUnique({ where: { id: nodeId }, select: targetNodeColumns });
    if (node === null) throw new ConnectError(`node ${nodeId} not found`, Code.NotFound);
    checkNodeTakes(node, capability, engineOfSpec(spec));
    // The fast path: a job for a node that is online with a session here, and first in its
    // ordering key (if any), is leased in the same step that creates it.
    let leaseNow = ctx.leasing.connected(node.id) && ctx.liveness.of(node, ctx.clock.now()) === "online";
    if (orderingKey !== null) {
      // Jobs of one key get their creation order (seq) in commit order: a later job's seq is
      // drawn only after an earlier one committed, so a leasing pass can never see a key's
      // later job without every earlier one.
      await tx.$queryRaw`SELECT 1 AS locked FROM (SELECT pg_advisory_xact_lock(hashtextextended(${`modelforge.job-key:${orderingKey}`}, 0))) AS l`;
      if (leaseNow) {
        const ahead = await tx.job.findFirst({ where: { orderingKey, state: { in: ["pending", "leased"] } }, select: { id: true } });
        leaseNow = ahead === null;
      }
    }
    const now = new Date(ctx.clock.now());
    const leaseExpiresAt = leaseNow ? new Date(leaseExpiry(now.getTime(), config.leaseDurationMs)) : null;
    const row = {
      id: input.id ?? randomUUID(),
      nodeId: node.id,
      capability,
      spec: toJson(JobSpecSchema, spec),
      orderingKey,
      maxAttempts,
      leaseExpiresAt,
      now,
    };
    const seq = await insertJob(tx, {
      ...row,
      audit: {
        id: randomUUID(),
        actor: input.by?.actor ?? systemActor,
        actorName: input.by?.actorName,
        correlationId: input.correlationId,
        details: {
          nodeId: node.id,
          capability,
          maxAttempts: String(maxAttempts),
          ...(orderingKey !== null ? { orderingKey } : {}),
        },
      },
    });
    return newJobRow(row, seq, leaseNow);
  };
  // A keyed job needs its advisory lock held across the check and the insert; an unkeyed one
  // is a read and one atomic statement.
  const job = orderingKey !== null ? await ctx.prisma.$transaction((tx) => create(tx)) : await create(ctx.prisma);
  if (job.state === "leased" && job.leaseExpiresAt !== null) {
    const lease = leaseOf({
      id: job.id,
      attempt: job.attempt,
      leaseExpiresAt: job.leaseExpiresAt.getTime(),
      spec,
      orderingKey: job.orderingKey,
    });
    ctx.metrics?.leaseGranted();
    if (!ctx.leasing.sendLease(job.nodeId, lease)) {
      ctx.log.warn({ nodeId: job.nodeId, jobId: job.id }, "lease created but the session closed");
    } else ctx.metrics?.dispatched(ctx.clock.now() - job.createdAt.getTime());
  } else {
    ctx.leasing.kick(job.nodeId);
  }
  return job;
}
