// GetNode: the node with its GPUs, latest telemetry, stream cursors (with any rejection reason)
// and credentials.
import { create, fromJson, type JsonValue } from "@bufbuild/protobuf";
import { GpuSchema, GpuState, StreamCursorSchema, TelemetrySnapshotSchema } from "../../gen/proto/modelforge/admin/v1/admin_pb.js";
import { GpuInfoSchema, TelemetrySchema } from "../../gen/proto/modelforge/common/v1/common_pb.js";
import { findNodeOrThrow } from "../identity/node-record.js";
import { nodeMessages, type ViewDeps } from "./view.js";
import { reportedGpu } from "./gpus.js";
import { ts } from "../rpc/convert.js";
import { credentialToProto } from "./codec.js";

export async function nodeDetail(deps: ViewDeps, nodeId: string) {
  const prisma = deps.prisma;
  const node = await findNodeOrThrow(prisma, nodeId);
  const [gpus, telemetry, cursors, credentials] = await Promise.all([
    prisma.gpu.findMany({ where: { nodeId: node.id }, orderBy: [{ index: "asc" }, { uuid: "asc" }] }),
    prisma.nodeTelemetry.findUnique({ where: { nodeId: node.id } }),
    prisma.streamCursor.findMany({ where: { nodeId: node.id }, orderBy: { stream: "asc" } }),
    prisma.nodeCredential.findMany({ where: { nodeId: node.id }, orderBy: { issuedAt: "desc" } }),
  ]);
  return {
    node: (await nodeMessages(deps, [node]))[0]!.message,
    gpus: gpus.map((g) =>
      create(GpuSchema, {
        info: create(GpuInfoSchema, reportedGpu(g)),
        state: g.state === "missing" ? GpuState.MISSING : GpuState.PRESENT,
        firstSeenAt: ts(g.firstSeenAt),
        lastSeenAt: ts(g.lastSeenAt),
        missingSince: ts(g.missingSince),
      }),
    ),
    telemetry:
      telemetry === null
        ? undefined
        : create(TelemetrySnapshotSchema, {
            sequence: BigInt(telemetry.sequence),
            observedAt: ts(telemetry.observedAt),
            receivedAt: ts(telemetry.receivedAt),
            telemetry: fromJson(TelemetrySchema, telemetry.data as JsonValue, { ignoreUnknownFields: true }),
          }),
    cursors: cursors.map((c) =>
      create(StreamCursorSchema, {
        stream: c.stream,
        sequence: BigInt(c.sequence),
        appliedSequence: BigInt(c.appliedSequence),
        appliedObservedAt: ts(c.appliedObservedAt),
        receivedAt: ts(c.receivedAt),
        rejectionReason: c.rejectionReason ?? "",
      }),
    ),
    credentials: credentials.map(credentialToProto),
  };
}
