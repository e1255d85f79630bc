// Which deployments the controller's periodic pass reads. Reading every live deployment with its
// instances through Prisma cost the leader more CPU a pass than any other loop on a fleet at rest
// (bench/sweeps.ts), every second, to find nothing to do. At rest: not being deleted; no instance
// with a step in flight, pending, loading or draining; no instance ready that should not serve (a
// superseded revision, a slot scaled away, any when the operator wants it drained or unloaded); when
// serving, every wanted slot of the current revision (a surge's included) present and none of them
// unloaded, nor failed after serving with restarts left; and no instance holding memory on a node
// lost to it, whose labels no longer match its selector, or assigned a GPU its node reports missing
// (./node-loss.ts, the same rules in SQL).
// ./rules.ts plan has nothing to do for such a deployment;
// everything else is read, a superset of what plan acts on (test/database/deployments/unsettled.test.ts
// checks that over every shape of instances on a real database). Decided from the instances, not
// from the stored overall state. A change made elsewhere reconciles its deployment at once
// (./controller.ts reconcile); this pass is the net.
import type { PrismaClient } from "../../gen/prisma/client.js";
import type { LossBounds } from "./node-loss.js";
import { MAX_RESTARTS } from "./rules.js";

export async function unsettledDeployments(prisma: PrismaClient, now: number, loss: LossBounds): Promise<string[]> {
  const stale = new Date(now - loss.staleAfterMs);
  const quiet = new Date(now - loss.replaceAfterMs);
  const rows = await prisma.$queryRaw<{ id: string }[]>`
    SELECT d.id::text AS id
      FROM "Deployment" AS d
     WHERE d.desired = 'deleted'
        OR (d.desired = 'serving'
            AND (SELECT count(*) FROM "DeploymentInstance" AS c
                  WHERE c."deploymentId" = d.id AND c.revision = d.revision AND c.replica < (d.replicas + CASE WHEN d."surgeForNodeId" IS NULL THEN 0 ELSE 1 END)) < (d.replicas + CASE WHEN d."surgeForNodeId" IS NULL THEN 0 ELSE 1 END))
        OR EXISTS (SELECT 1 FROM "DeploymentInstance" AS i
                    WHERE i."deploymentId" = d.id
                      AND (i."jobId" IS NOT NULL
                           OR i.phase IN ('pending', 'loading', 'draining')
                           OR (i.phase = 'ready' AND (d.desired <> 'serving' OR i.revision <> d.revision OR i.replica >= (d.replicas + CASE WHEN d."surgeForNodeId" IS NULL THEN 0 ELSE 1 END)))
                           OR (d.desired = 'serving' AND i.revision = d.revision AND i.replica < (d.replicas + CASE WHEN d."surgeForNodeId" IS NULL THEN 0 ELSE 1 END)
                               AND (i.phase = 'unloaded'
                                    OR (i.phase = 'failed' AND i."runtimeId" IS NOT NULL AND i.restarts < ${MAX_RESTARTS})))))
        OR EXISTS (SELECT 1 FROM "DeploymentInstance" AS i JOIN "Node" AS n ON n.id = i."nodeId"
                    WHERE i."deploymentId" = d.id AND i.phase IN ('loading', 'ready', 'draining')
                      AND (n."disabledAt" IS NOT NULL OR n."decommissionedAt" IS NOT NULL
                           OR n."lastHeartbeatAt" IS NULL OR n."lastHeartbeatAt" < ${stale}
                           OR (n."sessionReplica" IS NULL AND n."lastHeartbeatAt" < ${quiet})))
        OR (d."nodeId" IS NULL
            AND EXISTS (SELECT 1 FROM "DeploymentInstance" AS i JOIN "Node" AS n ON n.id = i."nodeId"
                         WHERE i."deploymentId" = d.id AND i.phase IN ('loading', 'ready', 'draining')
                           AND NOT (n.labels @> d.selector)))
        OR EXISTS (SELECT 1 FROM "DeploymentInstance" AS i
                     JOIN "Gpu" AS g ON g."nodeId" = i."nodeId" AND g.uuid = ANY (i."gpuUuids")
                    WHERE i."deploymentId" = d.id AND i.phase IN ('loading', 'ready', 'draining') AND g.state = 'missing')
     ORDER BY d.id`;
  return rows.map((r) => r.id);
}
