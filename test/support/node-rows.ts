// A node as placement reads it, stored straight in the database: online on the given clock, able
// to run every deployment step, with telemetry of its memory and an empty disk. For tests of the
// controller's passes without agents.
import type { PrismaClient } from "../../gen/prisma/client.js";

export async function placeableNode(
  prisma: PrismaClient,
  node: { id: string; name: string; at: number; memoryBytes: number; engines: string[]; labels?: { [key: string]: string } },
): Promise<void> {
  await prisma.node.create({
    data: {
      id: node.id,
      name: node.name,
      labels: node.labels ?? {},
      lastHeartbeatAt: new Date(node.at),
      sessionReplica: "r1",
      engines: node.engines,
      capabilities: ["artifact.acquire.v1", "deployment.load.v1", "deployment.drain.v1", "deployment.unload.v1"],
      telemetry: {
        create: {
          sequence: 1n,
          observedAt: new Date(node.at),
          receivedAt: new Date(node.at),
          data: {
            memoryTotalBytes: String(node.memoryBytes),
            memoryUsedBytes: "0",
            mounts: [{ mount: "/", sizeBytes: String(2 ** 40), usedBytes: "0" }],
          },
        },
      },
    },
  });
}
