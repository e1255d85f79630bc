// What a node reports: heartbeats, inventories and telemetry, with identical rules whether they
// arrive on the Session stream or as unary calls. The ordering and reconciliation rules are the
// pure functions in ./cursor.ts and ./gpus.ts; this module is the database around them.
import { Code, ConnectError } from "@connectrpc/connect";
import { create, toJson } from "@bufbuild/protobuf";
import { timestampMs } from "@bufbuild/protobuf/wkt";
import {
  PutInventoryResponseSchema,
  PutTelemetryResponseSchema,
  SampleDisposition,
  type InventoryReport,
  type TelemetryReport,
} from "../../gen/proto/modelforge/agent/v1/agent_pb.js";
import { HostInfoSchema, TelemetrySchema } from "../../gen/proto/modelforge/common/v1/common_pb.js";
import { advanceCursor, judgeSample, type StreamCursor as CursorState, type Verdict } from "./cursor.js";
import { reconcileGpus, reportedGpu, InventoryError, type KnownGpu } from "./gpus.js";
import { recordAudit, nodeActor } from "../audit/audit.js";
import type { Prisma, PrismaClient } from "../../gen/prisma/client.js";
import type { Clock } from "../../common/clock.js";

/** What accepting a node's reports works with. */
export interface ReportDeps {
  prisma: PrismaClient;
  clock: Clock;
  /** Observations further in the future than this advance the cursor but are not applied. */
  maxFutureSkewMs: number;
}

type Tx = Prisma.TransactionClient;
type Stream = "inventory" | "telemetry";

const maxGpus = 64;
const maxMounts = 256;

/** Reads, judges and moves a stream cursor inside `tx`; runs `apply` only for an 'apply' verdict. */
async function acceptSample(
  tx: Tx,
  nodeId: string,
  stream: Stream,
  sample: { sequence: bigint; observedAt: number },
  receivedAt: number,
  maxFutureSkewMs: number,
  apply: () => Promise<void>,
): Promise<Verdict> {
  const row = await tx.streamCursor.findUnique({ where: { nodeId_stream: { nodeId, stream } } });
  const cursor: CursorState | null =
    row === null
      ? null
      : {
          sequence: row.sequence,
          appliedSequence: row.appliedSequence === 0n ? null : row.appliedSequence,
          appliedObservedAt: row.appliedObservedAt?.getTime() ?? null,
          receivedAt: row.receivedAt.getTime(),
          rejectionReason: row.rejectionReason,
        };
  const verdict = judgeSample(cursor, sample, receivedAt, maxFutureSkewMs);
  if (verdict.kind === "replay") throw new ConnectError(`${stream} ${verdict.reason}`, Code.Aborted);
  if (verdict.kind === "invalid") throw new ConnectError(`${stream}: ${verdict.reason}`, Code.InvalidArgument);
  const next = advanceCursor(cursor, sample, verdict, receivedAt);
  const data = {
    sequence: next.sequence,
    appliedSequence: next.appliedSequence ?? 0n,
    appliedObservedAt: next.appliedObservedAt === null ? null : new Date(next.appliedObservedAt),
    receivedAt: new Date(next.receivedAt),
    rejectionReason: next.rejectionReason,
  };
  if (row === null) {
    await tx.streamCursor.create({ data: { nodeId, stream, ...data } });
  } else {
    // Compare-and-set on the sequence: of two samples racing (stream and unary), one moves the
    // cursor and the other is refused as a replay rather than both applying.
    const moved = await tx.streamCursor.updateMany({ where: { nodeId, stream, sequence: row.sequence }, data });
    if (moved.count !== 1) throw new ConnectError(`${stream} sequence ${sample.sequence} raced a newer sample`, Code.Aborted);
  }
  if (verdict.kind === "apply") await apply();
  return verdict;
}

function dispositionOf(v: Verdict): { disposition: SampleDisposition; reason: string } {
  switch (v.kind) {
    case "apply":
      return { disposition: SampleDisposition.APPLIED, reason: "" };
    case "older":
      return { disposition: SampleDisposition.OBSERVATION_OLDER, reason: v.reason };
    case "future":
      return { disposition: SampleDisposition.OBSERVATION_IN_FUTURE, reason: v.reason };
    default:
      throw new Error(`unexpected verdict ${v.kind}`);
  }
}

function observedAtOf(report: { observedAt?: Parameters<typeof timestampMs>[0] }): number {
  if (report.observedAt === undefined) throw new ConnectError("observed_at is required", Code.InvalidArgument);
  return timestampMs(report.observedAt);
}

export async function putInventory(deps: ReportDeps, nodeId: string, report: InventoryReport | undefined, correlationId: string) {
  if (report === undefined) throw new ConnectError("report is required", Code.InvalidArgument);
  if (report.gpus.length > maxGpus) throw new ConnectError(`at most ${maxGpus} GPUs per inventory`, Code.InvalidArgument);
  if ((report.host?.disks.length ?? 0) > maxMounts) throw new ConnectError(`at most ${maxMounts} disks`, Code.InvalidArgument);
  const sample = { sequence: report.sequence, observedAt: observedAtOf(report) };
  const receivedAt = deps.clock.now();
  const verdict = await deps.prisma.$transaction(async (tx) =>
    acceptSample(tx, nodeId, "inventory", sample, receivedAt, deps.maxFutureSkewMs, async () => {
      const known = await tx.gpu.findMany({ where: { nodeId } });
      let plan: ReturnType<typeof reconcileGpus>;
      try {
        plan = reconcileGpus(
          known.map(
            (g): KnownGpu => ({
              ...reportedGpu(g),
              state: g.state === "missing" ? "missing" : "present",
              missingSince: g.missingSince?.getTime() ?? null,
            }),
          ),
          report.gpus.map(reportedGpu),
          report.gpuCollectionComplete,
          receivedAt,
        );
      } catch (err) {
        if (err instanceof InventoryError) throw new ConnectError(`inventory: ${err.message}`, Code.InvalidArgument);
        throw err;
      }
      const seenAt = new Date(receivedAt);
      for (const u of plan.upserts) {
        await tx.gpu.upsert({
          where: { nodeId_uuid: { nodeId, uuid: u.uuid } },
          create: { nodeId, uuid: u.uuid, ...u.facts, state: "present", firstSeenAt: seenAt, lastSeenAt: seenAt },
          update: { ...u.facts, state: "present", missingSince: null, lastSeenAt: seenAt },
        });
      }
      if (plan.markMissing.length > 0) {
        await tx.gpu.updateMany({
          where: { nodeId, uuid: { in: plan.markMissing } },
          data: { state: "missing", missingSince: new Date(plan.missingSince) },
        });
      }
      for (const e of plan.events) {
        await recordAudit(tx, {
          actor: nodeActor(nodeId),
          action: e.action,
          targetType: "gpu",
          targetId: e.uuid,
          correlationId,
          details: { nodeId },
        });
      }
      if (report.host !== undefined) {
        await tx.node.update({
          where: { id: nodeId },
          data: { host: toJson(HostInfoSchema, report.host) as Prisma.InputJsonValue },
        });
      }
    }),
  );
  return create(PutInventoryResponseSchema, dispositionOf(verdict));
}

export async function putTelemetry(deps: ReportDeps, nodeId: string, report: TelemetryReport | undefined) {
  if (report === undefined) throw new ConnectError("report is required", Code.InvalidArgument);
  const t = report.telemetry;
  if (t !== undefined && (t.gpus.length > maxGpus || t.mounts.length > maxMounts)) {
    throw new ConnectError("telemetry has too many GPUs or mounts", Code.InvalidArgument);
  }
  const sample = { sequence: report.sequence, observedAt: observedAtOf(report) };
  const receivedAt = deps.clock.now();
  // Telemetry is never audited: it changes every sample.
  const verdict = await deps.prisma.$transaction(async (tx) =>
    acceptSample(tx, nodeId, "telemetry", sample, receivedAt, deps.maxFutureSkewMs, async () => {
      const row = {
        sequence: sample.sequence,
        observedAt: new Date(sample.observedAt),
        receivedAt: new Date(receivedAt),
        data: toJson(TelemetrySchema, t ?? create(TelemetrySchema)) as Prisma.InputJsonValue,
      };
      await tx.nodeTelemetry.upsert({ where: { nodeId }, create: { nodeId, ...row }, update: row });
    }),
  );
  return create(PutTelemetryResponseSchema, dispositionOf(verdict));
}
