// After an agent (re)connects, its Hello lists the deployment runtimes it holds. Reconcile the two
// views: a runtime the server does not expect there is unloaded; an instance the server thinks is
// ready but the node lost (an agent restart stops its runtimes) loads again.
import type { HeldDeployment } from "../../gen/proto/modelforge/agent/v1/agent_pb.js";
import type { PrismaClient } from "../../gen/prisma/client.js";
import type { Clock } from "../../common/clock.js";
import type { Logger } from "../observability/logger.js";
import type { CreateJobInput } from "../jobs/create.js";
import { specOfStep } from "./specs.js";
import { event } from "./controller.js";

export interface HeldDeps {
  prisma: PrismaClient;
  clock: Clock;
  log: Logger;
  jobs: { createJob(input: CreateJobInput): Promise<unknown> };
  /** Asked to look at a deployment again now. */
  kick(deploymentId: string): void;
}

const key = (id: string, revision: bigint) => `${id}#${revision}`;

/** The pure part: which held runtimes are strays, which expected instances are lost. */
export function compareHeld(
  held: Pick<HeldDeployment, "deploymentId" | "revision">[],
  expected: { deploymentId: string; revision: bigint; phase: string; jobId: string | null }[],
): { strays: { deploymentId: string; revision: bigint }[]; lost: { deploymentId: string; revision: bigint }[] } {
  const live = new Set(expected.filter((e) => e.phase !== "unloaded" && e.phase !== "failed").map((e) => key(e.deploymentId, e.revision)));
  const heldKeys = new Set(held.map((h) => key(h.deploymentId, h.revision)));
  return {
    strays: held
      .filter((h) => !live.has(key(h.deploymentId, h.revision)))
      .map((h) => ({ deploymentId: h.deploymentId, revision: h.revision })),
    // Only a ready instance with no step in flight is lost; a loading one has its load job coming.
    lost: expected
      .filter((e) => e.phase === "ready" && e.jobId === null && !heldKeys.has(key(e.deploymentId, e.revision)))
      .map((e) => ({ deploymentId: e.deploymentId, revision: e.revision })),
  };
}

export async function reconcileHeld(deps: HeldDeps, nodeId: string, held: HeldDeployment[]): Promise<void> {
  const { prisma, clock, log } = deps;
  const expected = await prisma.deploymentInstance.findMany({
    where: { nodeId },
    select: { deploymentId: true, revision: true, phase: true, jobId: true },
  });
  const { strays, lost } = compareHeld(held, expected);
  const now = new Date(clock.now());
  for (const s of strays) {
    log.warn(
      { nodeId, deploymentId: s.deploymentId, revision: String(s.revision) },
      "node holds a deployment runtime it should not: unloading it",
    );
    await deps.jobs.createJob({
      nodeId,
      spec: specOfStep("unload", {
        deploymentId: s.deploymentId,
        revision: s.revision,
        runtimeProfile: "",
        repository: "",
        commit: "",
        modelFile: "",
        targetRoot: "",
        drainTimeoutMs: 0,
        files: [],
      }),
      orderingKey: s.deploymentId,
      maxAttempts: 0,
      correlationId: `deployment:${s.deploymentId}`,
    });
  }
  for (const l of lost) {
    const reason = "the node no longer holds the runtime (agent restarted): loading it again";
    const moved = await prisma.$transaction(async (tx) => {
      const m = await tx.deploymentInstance.updateMany({
        where: { deploymentId: l.deploymentId, revision: l.revision, phase: "ready", jobId: null },
        data: { phase: "loading", step: "load", reason, runtimeId: null, updatedAt: now },
      });
      if (m.count === 1) await event(tx, { id: l.deploymentId, nodeId }, l.revision, "ready", "loading", reason, now);
      return m.count === 1;
    });
    if (moved) {
      log.warn({ nodeId, deploymentId: l.deploymentId, revision: String(l.revision) }, reason);
      deps.kick(l.deploymentId);
    }
  }
}
