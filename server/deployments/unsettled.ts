// Which deployments the controller's periodic pass reads. Reading every live deployment with its
// instances through Prisma cost the leader more CPU a pass than any other loop on a fleet at rest
// (bench/sweeps.ts), every second, to find nothing to do. At rest: not being deleted; no instance with a step in
// flight, loading or draining; no instance ready that should not serve (a superseded revision, or
// any revision when the operator wants it drained or unloaded); and, when serving, an instance of
// the current revision. ./rules.ts plan has nothing to do for such a deployment; everything else is
// read, a superset of what plan acts on (test/deployments/unsettled.test.ts checks that over every
// shape of instances on a real database). Decided from the instances, not from the stored overall
// state: the pass this replaced trusted that state and missed, for one, a superseded revision
// still loading once the current one had failed and the operator unloaded it. A change made
// elsewhere reconciles its deployment at once (./controller.ts reconcile); this pass is the net.
import type { PrismaClient } from "../../gen/prisma/client.js";

export async function unsettledDeployments(prisma: PrismaClient): Promise<string[]> {
  const rows = await prisma.$queryRaw<{ id: string }[]>`
    SELECT d.id::text AS id
      FROM "Deployment" AS d
     WHERE NOT (d.desired <> 'deleted'
                AND (d.desired <> 'serving'
                     OR EXISTS (SELECT 1 FROM "DeploymentInstance" AS c WHERE c."deploymentId" = d.id AND c.revision = d.revision))
                AND NOT EXISTS (SELECT 1 FROM "DeploymentInstance" AS i
                                 WHERE i."deploymentId" = d.id
                                   AND (i."jobId" IS NOT NULL
                                        OR i.phase IN ('loading', 'draining')
                                        OR (i.phase = 'ready' AND (d.desired <> 'serving' OR i.revision <> d.revision)))))
     ORDER BY d.id`;
  return rows.map((r) => r.id);
}
