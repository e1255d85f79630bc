// The liveness reconciler: moves nodes between online, stale and offline, and audits each
// transition exactly once even with several replicas (the state change is a compare-and-set on
// the stored liveness).
import type { PrismaClient } from "../../gen/prisma/client.js";
import type { Clock } from "../../common/clock.js";
import { livenessTransition, type Liveness } from "./rules.js";
import { systemActor } from "../audit/audit.js";
import { moveLiveness } from "./sql.js";
import type { LivenessTracker } from "./tracker.js";
import type { Logger } from "../observability/logger.js";

/** What the liveness reconciler works with. */
export interface ReconcilerDeps {
  prisma: PrismaClient;
  clock: Clock;
  liveness: LivenessTracker;
  log: Logger;
}

export async function reconcileLiveness(deps: ReconcilerDeps, now = deps.clock.now()): Promise<number> {
  const prisma = deps.prisma;
  const { staleAfterMs, offlineAfterMs } = deps.liveness.thresholds;
  const staleCut = new Date(now - staleAfterMs);
  const offlineCut = new Date(now - offlineAfterMs);
  // Only nodes whose stored liveness the persisted heartbeat contradicts; the heartbeat in memory,
  // which may be newer, decides below. A fleet at rest costs one query that returns nothing (a scan
  // of the Node table, on the leader only; bench/sweeps.ts times it).
  const nodes = await prisma.node.findMany({
    where: {
      decommissionedAt: null,
      disabledAt: null,
      OR: [
        { liveness: "online", OR: [{ lastHeartbeatAt: null }, { lastHeartbeatAt: { lt: staleCut } }] },
        { liveness: "stale", OR: [{ lastHeartbeatAt: { gte: staleCut } }, { lastHeartbeatAt: { lt: offlineCut } }] },
        { liveness: { in: ["pending", "offline"] }, lastHeartbeatAt: { gte: offlineCut } },
        { liveness: "pending", lastHeartbeatAt: { not: null } },
      ],
    },
    select: { id: true, liveness: true, lastHeartbeatAt: true },
  });
  // Grouped by transition, so a fleet coming online (or a replica's worth going stale) is a few
  // statements, not a transaction per node.
  const groups = new Map<string, { previous: Liveness; next: Liveness; action: string | undefined; ids: string[] }>();
  for (const n of nodes) {
    const previous = n.liveness as Liveness;
    // The query left out disabled and decommissioned nodes: time alone decides here.
    const next = deps.liveness.of(n, now);
    const t = livenessTransition(previous, next);
    if (!t.changed) continue;
    const key = `${previous}>${next}`;
    const group = groups.get(key) ?? { previous, next, action: t.audit ? t.action : undefined, ids: [] };
    group.ids.push(n.id);
    groups.set(key, group);
  }
  let changes = 0;
  for (const { previous, next, action, ids } of groups.values()) {
    for (let i = 0; i < ids.length; i += batchSize) {
      const moved = await moveLiveness(prisma, {
        ids: ids.slice(i, i + batchSize),
        from: previous,
        to: next,
        at: new Date(now),
        action,
        actor: systemActor,
      });
      changes += moved.length;
      for (const id of moved) deps.log.info({ nodeId: id, from: previous, to: next }, "node liveness changed");
    }
  }
  return changes;
}

/** Nodes moved per statement, so one statement never holds thousands of row locks. */
const batchSize = 1000;
