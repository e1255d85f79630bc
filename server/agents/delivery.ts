// Delivers update instructions to the nodes whose sessions this replica holds: each node the
// rollout marked updating gets one instruction per send (its sentAt), and again after its session
// reopens while it is still on another version (the instruction may have been lost with it).
import { create } from "@bufbuild/protobuf";
import { InstructionSchema, SessionResponseSchema } from "../../gen/proto/modelforge/agent/v1/agent_pb.js";
import { AgentUpdateInstructionSchema } from "../../gen/proto/modelforge/agent/v1/agent_update_pb.js";
import type { PrismaClient } from "../../gen/prisma/client.js";
import type { NodeSessions } from "../node-sessions.js";
import type { Logger } from "../observability/logger.js";
import { platformOf } from "./rollout-input.js";

export class UpdateDelivery {
  /** The sentAt (ms) last delivered per node. */
  private readonly delivered = new Map<string, number>();

  constructor(private readonly deps: { prisma: PrismaClient; sessions: Pick<NodeSessions, "get">; log: Logger }) {}

  /** A node's session opened: whatever was delivered before may have been lost with the old one. */
  sessionOpened(nodeId: string): void {
    this.delivered.delete(nodeId);
  }

  async deliver(): Promise<void> {
    const rows = await this.deps.prisma.agentRolloutNode.findMany({
      where: { state: "updating", sentAt: { not: null }, rollout: { state: { in: ["running", "paused"] } } },
      select: { nodeId: true, rolloutId: true, sentAt: true, rollout: { select: { version: true } } },
    });
    const here = rows.filter((r) => this.deps.sessions.get(r.nodeId) !== undefined && this.delivered.get(r.nodeId) !== r.sentAt!.getTime());
    if (here.length === 0) return;
    const nodes = await this.deps.prisma.node.findMany({
      where: { id: { in: here.map((r) => r.nodeId) } },
      select: { id: true, host: true, agentVersion: true },
    });
    for (const row of here) {
      const node = nodes.find((n) => n.id === row.nodeId);
      if (node === undefined || node.agentVersion === row.rollout.version) continue;
      const platform = platformOf(node.host);
      const release =
        platform === undefined
          ? null
          : await this.deps.prisma.agentRelease.findUnique({
              where: { version_platform: { version: row.rollout.version, platform } },
            });
      if (release === null) {
        this.deps.log.warn({ nodeId: row.nodeId, platform, version: row.rollout.version }, "no agent release for the node's platform");
        continue;
      }
      const instruction = create(InstructionSchema, {
        kind: {
          case: "agentUpdate",
          value: create(AgentUpdateInstructionSchema, {
            rolloutId: row.rolloutId,
            version: release.version,
            platform: release.platform,
            sha256: release.sha256,
            sizeBytes: release.sizeBytes,
            ...(release.signature !== null ? { signature: new Uint8Array(release.signature) } : {}),
          }),
        },
      });
      const sent = this.deps.sessions
        .get(row.nodeId)
        ?.send(create(SessionResponseSchema, { message: { case: "instruction", value: instruction } }));
      if (sent === true) this.delivered.set(row.nodeId, row.sentAt!.getTime());
    }
  }
}
