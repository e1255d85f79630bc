// After an agent (re)connects, its Hello lists the deployment runtimes it holds. Reconcile the two
// views: a runtime the server does not expect there is unloaded; an instance the server thinks is
// ready but the node lost (an agent restart stops its runtimes) loads again.
import type { HeldDeployment } from "../../gen/proto/modelforge/agent/v1/agent_pb.js";
import type { PrismaClient } from "../../gen/prisma/client.js";
import type { Clock } from "../../common/clock.js";
import type { Logger } from "../observability/logger.js";
import type { CreateJobInput } from "../jobs/create.js";
import { unloadOnNode } from "./specs.js";
import { event, holdDeployment } from "./controller.js";

export interface HeldDeps {
  prisma: PrismaClient;
  clock: Clock;
  log: Logger;
  jobs: { createJob(input: CreateJobInput): Promise<unknown> };
  /** Asked to look at a deployment again now. */
  kick(deploymentId: string): void;
}

/** A runtime a node holds: its replica slot is unknown (undefined) when an older agent reported it. */
export interface HeldRuntime {
  deploymentId: string;
  revision: bigint;
  replica: number | undefined;
}

/** An instance the server has on the node. */
export interface ExpectedInstance {
  deploymentId: string;
  revision: bigint;
  replica: number;
  phase: string;
  jobId: string | null;
}

/**
 * Whether the held runtime serves the instance. An older agent names no slot: it holds one runtime
 * per revision, which serves whichever replica of that revision the node has.
 */
const serves = (h: HeldRuntime, e: Omit<ExpectedInstance, "phase" | "jobId">) =>
  h.deploymentId === e.deploymentId && h.revision === e.revision && (h.replica === undefined || h.replica === e.replica);

/** The pure part: which held runtimes are strays, which expected instances are lost. */
export function compareHeld(
  held: readonly HeldRuntime[],
  expected: readonly ExpectedInstance[],
): { strays: HeldRuntime[]; lost: Omit<ExpectedInstance, "phase" | "jobId">[] } {
  const live = expected.filter((e) => e.phase !== "unloaded" && e.phase !== "failed");
  return {
    strays: held.filter((h) => !live.some((e) => serves(h, e))),
    // Only a ready instance with no step in flight is lost; a loading one has its load job coming.
    lost: expected
      .filter((e) => e.phase === "ready" && e.jobId === null && !held.some((h) => serves(h, e)))
      .map((e) => ({ deploymentId: e.deploymentId, revision: e.revision, replica: e.replica })),
  };
}

export async function reconcileHeld(deps: HeldDeps, nodeId: string, held: HeldDeployment[]): Promise<void> {
  const { prisma, clock, log } = deps;
  const expected = await prisma.deploymentInstance.findMany({
    where: { nodeId },
    select: { deploymentId: true, revision: true, replica: true, phase: true, jobId: true },
  });
  const { strays, lost } = compareHeld(
    held.map((h) => ({ deploymentId: h.deploymentId, revision: h.revision, replica: h.replica })),
    expected,
  );
  const now = new Date(clock.now());
  for (const s of strays) {
    log.warn(
      { nodeId, deploymentId: s.deploymentId, revision: String(s.revision), replica: s.replica },
      "node holds a deployment runtime it should not: unloading it",
    );
    await deps.jobs.createJob(unloadOnNode(nodeId, s));
  }
  for (const l of lost) {
    const reason = "the node no longer holds the runtime (it exited, or the agent restarted): loading it again";
    // The runtime id stays: it says the replica served, so a reload that fails places it elsewhere.
    const moved = await prisma.$transaction(async (tx) => {
      await holdDeployment(tx, l.deploymentId);
      const m = await tx.deploymentInstance.updateMany({
        where: { deploymentId: l.deploymentId, revision: l.revision, replica: l.replica, nodeId, phase: "ready", jobId: null },
        data: { phase: "loading", step: "load", reason, updatedAt: now },
      });
      if (m.count === 1) await event(tx, { id: l.deploymentId }, { ...l, nodeId }, "ready", "loading", reason, now);
      return m.count === 1;
    });
    if (moved) {
      log.warn({ nodeId, deploymentId: l.deploymentId, revision: String(l.revision), replica: l.replica }, reason);
      deps.kick(l.deploymentId);
    }
  }
}
