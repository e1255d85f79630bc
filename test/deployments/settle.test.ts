// An explicit reconcile (an operator's drain, a job's end) answers with the deployment's state
// settled, even when its own pass changes nothing: a concurrent pass (the sweep) may have won every
// write and not yet stored the state its moves imply, and `desired` alone moves the state (a ready
// instance of a drained deployment is draining). Seen under a loaded CI run: DrainDeployment
// answered READY, and the relay kept routing to the draining revision until the next sweep.
import { randomUUID } from "node:crypto";
import { pino } from "pino";
import { beforeAll, describe, expect, it } from "vitest";
import { ManualClock } from "../../common/clock.js";
import { DeploymentController } from "../../server/deployments/controller.js";
import { useTestDatabase } from "../support/db.js";

const t = useTestDatabase();
let nodeId: string;

beforeAll(async () => {
  nodeId = randomUUID();
  // Alive on the controller's clock: a node never heard from would have its replicas moved off it.
  await t.db.prisma.node.create({
    data: { id: nodeId, name: "gpu-settle", lastHeartbeatAt: new Date(Date.parse("2026-12-02T00:00:00Z")), sessionReplica: "r1" },
  });
}, 60_000);

/** A controller whose jobs are never created: these passes must not start any step. */
function controller() {
  const changed: string[] = [];
  const c = new DeploymentController({
    prisma: t.db.prisma,
    clock: new ManualClock(Date.parse("2026-12-02T00:00:00Z")),
    log: pino({ level: "silent" }),
    jobs: {
      createJob: () => {
        throw new Error("no step may start here");
      },
    },
    announce: (id) => changed.push(`announce ${id}`),
  });
  c.onChange((id) => changed.push(`local ${id}`));
  return { c, changed };
}

/** A deployment whose revision 1 is draining under a drain job still pending, stored as `state`. */
async function drainingUnderJob(state: string) {
  const id = randomUUID();
  const jobId = randomUUID();
  await t.db.prisma.deployment.create({ data: { id, name: `d-${id.slice(0, 8)}`, nodeId, desired: "drained", state } });
  await t.db.prisma.job.create({ data: { id: jobId, nodeId, capability: "deployment.drain.v1", spec: {}, state: "pending" } });
  await t.db.prisma.deploymentInstance.create({
    data: {
      deploymentId: id,
      revision: 1n,
      nodeId,
      runtimeProfile: "p",
      repository: "r",
      commit: "c",
      phase: "draining",
      step: "drain",
      jobId,
    },
  });
  return id;
}

describe("an explicit reconcile settles the deployment's state", () => {
  it("stores the state its instances and desired state imply, and says routing changed, when its pass moved nothing", async () => {
    const id = await drainingUnderJob("ready");
    const { c, changed } = controller();
    await c.reconcile(id);
    expect((await t.db.prisma.deployment.findUniqueOrThrow({ where: { id } })).state).toBe("draining");
    expect(changed).toEqual([`local ${id}`, `announce ${id}`]);
  });

  it("writes and says nothing when the stored state is already right", async () => {
    const id = await drainingUnderJob("draining");
    const before = await t.db.prisma.deployment.findUniqueOrThrow({ where: { id } });
    const { c, changed } = controller();
    await c.reconcile(id);
    expect(await t.db.prisma.deployment.findUniqueOrThrow({ where: { id } })).toEqual(before);
    expect(changed).toEqual([]);
  });
});
