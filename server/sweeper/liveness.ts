// The liveness reconciler: moves nodes between online, stale and
// offline, and audits each transition exactly once even with several replicas (the state change
// is a compare-and-set on the stored liveness). It also ends open streams whose credential was
// revoked, or whose node was disabled or decommissioned, through another replica.
import { Code, ConnectError } from "@connectrpc/connect";
import { computeLiveness, livenessTransition, type Liveness } from "../domain/liveness.js";
import { recordAudit, systemActor } from "../audit/audit.js";
import type { Deps } from "../app.js";

export async function reconcileLiveness(deps: Deps, now = Date.now()): Promise<number> {
  const prisma = deps.db.prisma;
  const nodes = await prisma.node.findMany({
    where: { decommissionedAt: null, disabledAt: null },
    select: { id: true, liveness: true, lastHeartbeatAt: true },
  });
  let changes = 0;
  for (const n of nodes) {
    const previous = n.liveness as Liveness;
    const next = computeLiveness(
      { lastHeartbeatAt: deps.heartbeats.lastHeartbeatAt(n.id, n.lastHeartbeatAt), disabled: false, decommissioned: false },
      now,
      { staleAfterMs: deps.config.staleAfterMs, offlineAfterMs: deps.config.offlineAfterMs },
    );
    const t = livenessTransition(previous, next);
    if (!t.changed) continue;
    const applied = await prisma.$transaction(async (tx) => {
      const moved = await tx.node.updateMany({
        where: { id: n.id, liveness: previous },
        data: { liveness: next, livenessChangedAt: new Date(now) },
      });
      if (moved.count !== 1) return false; // another replica got there first
      if (t.audit && t.action !== undefined) {
        await recordAudit(tx, {
          actor: systemActor,
          action: t.action,
          targetType: "node",
          targetId: n.id,
          details: { from: previous, to: next },
        });
      }
      return true;
    });
    if (applied) {
      changes++;
      deps.log.info({ nodeId: n.id, from: previous, to: next }, "node liveness changed");
    }
  }
  return changes;
}

/** Closes sessions here whose credential or node stopped being acceptable (possibly elsewhere). */
export async function closeRevokedSessions(deps: Deps): Promise<void> {
  const serials = deps.sessions.serials();
  if (serials.length === 0) return;
  const bad = await deps.db.prisma.nodeCredential.findMany({
    where: {
      serial: { in: serials },
      OR: [{ revokedAt: { not: null } }, { node: { disabledAt: { not: null } } }, { node: { decommissionedAt: { not: null } } }],
    },
    select: { serial: true, revokedAt: true },
  });
  for (const c of bad) {
    deps.sessions.closeSerials(
      [c.serial],
      c.revokedAt !== null
        ? new ConnectError("credential revoked", Code.Unauthenticated)
        : new ConnectError("node disabled or decommissioned", Code.PermissionDenied),
    );
  }
}
