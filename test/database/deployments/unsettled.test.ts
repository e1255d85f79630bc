// The deployments the controller's periodic pass reads (server/deployments/unsettled.ts), on a real
// database, against the controller's own rules: over every shape a deployment's instances can take
// (none, the current revision, a superseded one, or both; each phase with its steps, with and
// without a job in flight; a replica slot scaled away; one on a lost node; one failed after serving)
// and every desired state, plan never acts on a deployment the query leaves out, and the
// deployments at rest are left out.
import { describe, expect, it } from "vitest";
import { randomUUID } from "node:crypto";
import { unsettledDeployments } from "../../../server/deployments/unsettled.js";
import {
  CLAIM_GRACE_MS,
  MAX_RESTARTS,
  overallPhase,
  plan,
  type Desired,
  type InstanceView,
  type Phase,
  type Step,
} from "../../../server/deployments/rules.js";
import type { Prisma } from "../../../gen/prisma/client.js";
import { useTestDatabase } from "../../support/db.js";

const t = useTestDatabase();

const phaseSteps: [Phase, Step | null][] = [
  ["pending", null],
  ["loading", "acquire"],
  ["loading", "load"],
  ["loading", null],
  ["ready", null],
  ["draining", "drain"],
  ["draining", "unload"],
  ["draining", null],
  ["unloaded", null],
  ["failed", null],
];
const current = 2n;
const now = Date.now();
const loss = { staleAfterMs: 30_000, replaceAfterMs: 10_000 };
const lostWhy = "node was disabled";
// A job in flight whose row is missing past the claim grace: plan acts on it (retries the step).
const variants = (revision: bigint): InstanceView[] => [
  ...phaseSteps.flatMap(([phase, step]): InstanceView[] => [
    { revision, replica: 0, phase, step, jobId: null, claimedAt: null },
    { revision, replica: 0, phase, step, jobId: randomUUID(), claimedAt: now - CLAIM_GRACE_MS - 1, job: { state: "missing" } },
  ]),
  { revision, replica: 1, phase: "ready", step: null, jobId: null, claimedAt: null },
  { revision, replica: 0, phase: "ready", step: null, jobId: null, claimedAt: null, nodeLost: lostWhy },
  { revision, replica: 0, phase: "draining", step: "drain", jobId: null, claimedAt: null, nodeLost: lostWhy },
  { revision, replica: 0, phase: "failed", step: null, jobId: null, claimedAt: null, served: true, restarts: 0 },
  { revision, replica: 0, phase: "failed", step: null, jobId: null, claimedAt: null, served: true, restarts: MAX_RESTARTS },
];
const shapes: InstanceView[][] = [
  [],
  ...variants(current).map((i) => [i]),
  ...variants(current - 1n).map((i) => [i]),
  ...variants(current - 1n).flatMap((old) => variants(current).map((now) => [old, now])),
];
const desiredStates: Desired[] = ["serving", "drained", "unloaded", "deleted"];

describe("the deployments a controller pass reads", () => {
  it("include every one the rules would act on, and leave out those at rest", async () => {
    const { prisma } = t.db;
    const nodeId = randomUUID();
    const lostNodeId = randomUUID();
    await prisma.node.create({ data: { id: nodeId, name: "unsettled", lastHeartbeatAt: new Date(now), sessionReplica: "r1" } });
    await prisma.node.create({ data: { id: lostNodeId, name: "lost", lastHeartbeatAt: new Date(now), disabledAt: new Date(now) } });
    const acts = new Map<string, boolean>();
    const deployments: Prisma.DeploymentCreateManyInput[] = [];
    const instances: Prisma.DeploymentInstanceCreateManyInput[] = [];
    // A surge (an agent rollout restarting the node of the only READY replica) wants one slot more.
    const surges = desiredStates.flatMap((desired) => [0, 1].map((surge) => ({ desired, surge })));
    for (const { desired, surge } of surges) {
      for (const shape of shapes) {
        const id = randomUUID();
        const view = { desired, revision: current, replicas: 1, surge };
        acts.set(id, plan(view, shape, now).length > 0);
        deployments.push({
          id,
          name: `d-${deployments.length}`,
          desired,
          revision: current,
          replicas: 1,
          surgeForNodeId: surge === 1 ? nodeId : null,
          state: overallPhase(view, shape),
        });
        for (const i of shape)
          instances.push({
            deploymentId: id,
            revision: i.revision,
            replica: i.replica,
            nodeId: i.phase === "pending" ? null : i.nodeLost !== undefined ? lostNodeId : nodeId,
            restarts: i.restarts ?? 0,
            runtimeId: i.served === true ? "rt" : null,
            runtimeProfile: "",
            repository: "",
            commit: "",
            phase: i.phase,
            step: i.step,
            jobId: i.jobId,
            claimedAt: i.claimedAt === null ? null : new Date(i.claimedAt),
          });
      }
    }
    await prisma.deployment.createMany({ data: deployments });
    await prisma.deploymentInstance.createMany({ data: instances });

    const read = await unsettledDeployments(prisma, now, loss);
    expect(read).toEqual([...read].sort());
    const readSet = new Set(read);
    const missed = [...acts].filter(([id, act]) => act && !readSet.has(id));
    expect(missed).toEqual([]);

    // At rest: serving, with its one wanted replica of the current revision ready on a live node,
    // or failed for good (never served, or its restarts spent), and no job in flight.
    const atRest = deployments.filter((d, k) => {
      const shape = shapes[k % shapes.length]!;
      const i = shape[0];
      return (
        d.desired === "serving" &&
        d.surgeForNodeId === null &&
        shape.length === 1 &&
        i!.revision === current &&
        i!.replica === 0 &&
        i!.jobId === null &&
        i!.nodeLost === undefined &&
        (i!.phase === "ready" || (i!.phase === "failed" && (i!.served !== true || (i!.restarts ?? 0) >= MAX_RESTARTS)))
      );
    });
    expect(atRest).toHaveLength(3);
    for (const d of atRest) expect(readSet.has(d.id)).toBe(false);
    // What the rules act on is most of the rest; the query reads little beyond it.
    const acting = [...acts.values()].filter(Boolean).length;
    expect(read.length).toBeGreaterThanOrEqual(acting);
    expect(read.length).toBeLessThan(deployments.length);
  });
});
