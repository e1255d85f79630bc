// The deployments the controller's periodic pass reads (server/deployments/unsettled.ts), on a real
// database, against the controller's own rules: over every shape a deployment's instances can take
// (none, the current revision, a superseded one, or both; each phase with its steps, with and
// without a job in flight) and every desired state, plan never acts on a deployment the query
// leaves out, and the deployments at rest are left out.
import { describe, expect, it } from "vitest";
import { randomUUID } from "node:crypto";
import { unsettledDeployments } from "../../server/deployments/unsettled.js";
import {
  CLAIM_GRACE_MS,
  overallPhase,
  plan,
  type Desired,
  type InstanceView,
  type Phase,
  type Step,
} from "../../server/deployments/rules.js";
import type { Prisma } from "../../gen/prisma/client.js";
import { useTestDatabase } from "../support/db.js";

const t = useTestDatabase();

const phaseSteps: [Phase, Step | null][] = [
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
// A job in flight whose row is missing past the claim grace: plan acts on it (retries the step).
const variants = (revision: bigint): InstanceView[] =>
  phaseSteps.flatMap(([phase, step]) => [
    { revision, phase, step, jobId: null, claimedAt: null },
    { revision, phase, step, jobId: randomUUID(), claimedAt: 0, job: { state: "missing" } },
  ]);
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
    await prisma.node.create({ data: { id: nodeId, name: "unsettled" } });
    const acts = new Map<string, boolean>();
    const deployments: Prisma.DeploymentCreateManyInput[] = [];
    const instances: Prisma.DeploymentInstanceCreateManyInput[] = [];
    for (const desired of desiredStates) {
      for (const shape of shapes) {
        const id = randomUUID();
        const view = { desired, revision: current };
        acts.set(id, plan(view, shape, CLAIM_GRACE_MS + 1).length > 0);
        deployments.push({ id, name: `d-${deployments.length}`, nodeId, desired, revision: current, state: overallPhase(view, shape) });
        for (const i of shape)
          instances.push({
            deploymentId: id,
            revision: i.revision,
            nodeId,
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

    const read = await unsettledDeployments(prisma);
    expect(read).toEqual([...read].sort());
    const readSet = new Set(read);
    const missed = [...acts].filter(([id, act]) => act && !readSet.has(id));
    expect(missed).toEqual([]);

    // At rest: serving, with the current revision ready, failed or unloaded and no job in flight.
    const atRest = deployments.filter((d, k) => {
      const shape = shapes[k % shapes.length]!;
      return (
        d.desired === "serving" &&
        shape.length === 1 &&
        shape[0]!.revision === current &&
        shape[0]!.jobId === null &&
        ["ready", "failed", "unloaded"].includes(shape[0]!.phase)
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
