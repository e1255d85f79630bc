// An explicit reconcile (an operator's drain, a job's end) answers with the deployment's state
// settled, even when its own pass changes nothing: a concurrent pass (the sweep) may have won every
// write and not yet stored the state its moves imply, and `desired` alone moves the state (a ready
// instance of a drained deployment is draining). Seen under a loaded CI run: DrainDeployment
// answered READY, and the relay kept routing to the draining revision until the next sweep.
import { randomUUID } from "node:crypto";
import { pino } from "pino";
import { beforeAll, describe, expect, it } from "vitest";
import { ManualClock } from "../../../common/clock.js";
import { DeploymentController } from "../../../server/deployments/controller.js";
import { useTestDatabase } from "../../support/db.js";
import { placeableNode } from "../../support/node-rows.js";

const t = useTestDatabase();
let nodeId: string;

beforeAll(async () => {
  nodeId = randomUUID();
  // Alive on the controller's clock: a node never heard from would have its replicas moved off it.
  await t.db.prisma.node.create({
    data: { id: nodeId, name: "gpu-settle", lastHeartbeatAt: new Date(Date.parse("2026-12-02T00:00:00Z")), sessionReplica: "r1" },
  });
}, 60_000);

type CreateJob = ConstructorParameters<typeof DeploymentController>[0]["jobs"]["createJob"];

/** A controller whose jobs, by default, are never created: those passes must not start any step. */
function controller(
  createJob: CreateJob = () => {
    throw new Error("no step may start here");
  },
) {
  const changed: string[] = [];
  const c = new DeploymentController({
    prisma: t.db.prisma,
    clock: new ManualClock(Date.parse("2026-12-02T00:00:00Z")),
    log: pino({ level: "silent" }),
    jobs: { createJob },
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

// A node's Hello that finds a ready replica's runtime gone moves the replica to loading outside any
// pass, then kicks a reconcile. Seen in CI: that pass sent the load before it stored the state, the
// agent loaded at once, and a caller saw the deployment READY while its only replica was loading.
describe("a reconcile after an outside change", () => {
  it("stores the state the change implies before it starts any step on a node", async () => {
    const id = randomUUID();
    const commit = randomUUID().replaceAll("-", "");
    await t.db.prisma.deployment.create({
      data: { id, name: `d-${id.slice(0, 8)}`, nodeId, state: "ready", repository: "r", commit, runtimeProfile: "p" },
    });
    await t.db.prisma.storedArtifact.create({ data: { repository: "r", commit, path: "m.gguf", sizeBytes: 1n, sha256: "0".repeat(64) } });
    // As reconcileHeld leaves it: loading, its load step not yet started.
    await t.db.prisma.deploymentInstance.create({
      data: { deploymentId: id, revision: 1n, nodeId, runtimeProfile: "p", repository: "r", commit, phase: "loading", step: "load" },
    });
    const stateWhenSent: string[] = [];
    const { c } = controller(async (input) => {
      stateWhenSent.push((await t.db.prisma.deployment.findUniqueOrThrow({ where: { id } })).state);
      return { id: input.id ?? randomUUID() };
    });
    await c.reconcile(id);
    expect(stateWhenSent).toEqual(["loading"]);
  });
});

// A create that returns the deployment answers with its replicas placed where a node fits. Seen in
// CI: the sweep created the new deployment's replica first, the create's own pass lost that write,
// took it for "nothing to do" and stopped, and CreateDeployment answered with the replica unplaced.
describe("a reconcile whose write a concurrent pass won", () => {
  it("reads again and goes on: the replica another pass created is placed before the reconcile returns", async () => {
    const placeOn = randomUUID();
    await placeableNode(t.db.prisma, {
      id: placeOn,
      name: `n-${placeOn.slice(0, 8)}`,
      at: Date.parse("2026-12-02T00:00:00Z"),
      memoryBytes: 2 ** 30,
      engines: ["openai-http"],
    });
    const profile = `remote-${placeOn.slice(0, 8)}`;
    await t.db.prisma.runtimeProfile.create({
      data: { name: profile, engine: "openai-http", contextSize: 0, threads: 0, contentHash: "h" },
    });
    const id = randomUUID();
    const served = { runtimeProfile: profile, repository: "r", commit: placeOn.replaceAll("-", "") };
    await t.db.prisma.storedArtifact.create({
      data: { repository: "r", commit: served.commit, path: "m.gguf", sizeBytes: 1n, sha256: "0".repeat(64) },
    });
    await t.db.prisma.deployment.create({
      data: { id, name: `d-${id.slice(0, 8)}`, nodeId: placeOn, state: "pending", targetRoot: "/srv", ...served },
    });
    const started: unknown[] = [];
    // The concurrent pass creates replica 0 just after this pass read the deployment without it.
    let raced = false;
    const deployment = new Proxy(t.db.prisma.deployment, {
      get(target, key, receiver) {
        if (key !== "findUnique") return Reflect.get(target, key, receiver);
        return async (args: Parameters<typeof target.findUnique>[0]) => {
          const read = await target.findUnique(args);
          if (!raced) {
            raced = true;
            await t.db.prisma.deploymentInstance.create({
              data: { deploymentId: id, revision: 1n, replica: 0, phase: "pending", ...served },
            });
          }
          return read;
        };
      },
    });
    const prisma = new Proxy(t.db.prisma, {
      get: (target, key, receiver) => (key === "deployment" ? deployment : Reflect.get(target, key, receiver)),
    });
    const c = new DeploymentController({
      prisma,
      clock: new ManualClock(Date.parse("2026-12-02T00:00:00Z")),
      log: pino({ level: "silent" }),
      jobs: { createJob: async (input) => started.push(input.spec?.kind.case) },
    });
    await c.reconcile(id);
    expect(raced).toBe(true);
    const replica = await t.db.prisma.deploymentInstance.findFirstOrThrow({ where: { deploymentId: id } });
    expect({ nodeId: replica.nodeId, phase: replica.phase, reason: replica.reason }).toEqual({
      nodeId: placeOn,
      phase: "loading",
      reason: null,
    });
    expect(started).toEqual(["artifactAcquire"]);
  });
});
