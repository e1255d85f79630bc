// Ends open streams on this replica whose credential was revoked, or whose node was disabled or
// decommissioned, through another replica: the safety net behind the cluster bus, which tells
// every replica at once (a notification can be lost while a listener reconnects).
import { Code, ConnectError } from "@connectrpc/connect";
import type { PrismaClient } from "../../gen/prisma/client.js";
import type { Clock } from "../../common/clock.js";
import type { SessionRegistry } from "./registry.js";

/**
 * Closes sessions here whose credential was revoked, or whose node was disabled or decommissioned,
 * possibly through another replica. Asks only for changes since the last pass (with a margin for
 * clock differences between replicas), not about every open session.
 */
export function revokedSessionSweeper(
  deps: { prisma: PrismaClient; clock: Clock; sessions: SessionRegistry },
  marginMs = 10_000,
): () => Promise<void> {
  let since = new Date(deps.clock.now() - marginMs);
  return async () => {
    if (deps.sessions.size === 0) return;
    const started = deps.clock.now();
    const [credentials, nodes] = await Promise.all([
      deps.prisma.nodeCredential.findMany({ where: { revokedAt: { gte: since } }, select: { serial: true } }),
      deps.prisma.node.findMany({
        where: { OR: [{ disabledAt: { gte: since } }, { decommissionedAt: { gte: since } }] },
        select: { id: true, disabledAt: true, decommissionedAt: true },
      }),
    ]);
    deps.sessions.closeSerialsHere(
      credentials.map((c) => c.serial),
      new ConnectError("credential revoked", Code.Unauthenticated),
    );
    for (const n of nodes) {
      if (n.disabledAt !== null || n.decommissionedAt !== null) {
        deps.sessions.closeNodeHere(n.id, new ConnectError("node disabled or decommissioned", Code.PermissionDenied));
      }
    }
    since = new Date(started - marginMs);
  };
}
