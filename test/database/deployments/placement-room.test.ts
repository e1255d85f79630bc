// Room on a node is the node's, and passes read the fleet while others change it. Seen in
// elastic-eviction's runs: seven replicas ready on room for six, because the placement's
// transaction locked only its own deployment's row; and two replicas evicted for one room, because
// the sweep's pass and an event's ran over one deployment at once.
// - Another pass (of another deployment, on this control plane or another) places its replica on
//   the node just after this pass read the fleet: this pass's choice is stale, and it goes back for
//   a fresh view, which finds no room.
// - Two passes over one pending replica read the fleet before either evicts; the second finds its
//   candidates after the first evicted: it must not evict another for the same room.
import { randomUUID } from "node:crypto";
import { pino } from "pino";
import { beforeAll, describe, expect, it } from "vitest";
import { ManualClock } from "../../../common/clock.js";
import { DeploymentController } from "../../../server/deployments/controller.js";
import { useTestDatabase } from "../../support/db.js";
import { placeableNode } from "../../support/node-rows.js";

const t = useTestDatabase();
const now = Date.parse("2026-12-07T00:00:00Z");
const MiB = 2 ** 20;
const profile = "remote-600";
const served = { runtimeProfile: profile, repository: "acme/room", commit: "e".repeat(40) };
let nodeId: string;

/** The prisma client with one model's method wrapped. */
function wrapped<M extends "storedArtifact" | "deploymentInstance">(
  model: M,
  method: string,
  wrap: (call: (args: unknown) => Promise<unknown>, args: unknown) => Promise<unknown>,
) {
  const target = t.db.prisma[model] as unknown as Record<string, (args: unknown) => Promise<unknown>>;
  const proxied = new Proxy(target, {
    get: (o, key, receiver) => (key === method ? (args: unknown) => wrap((a) => o[method]!(a), args) : Reflect.get(o, key, receiver)),
  });
  return new Proxy(t.db.prisma, { get: (o, key, receiver) => (key === model ? proxied : Reflect.get(o, key, receiver)) });
}

beforeAll(async () => {
  // Replicas of 600 MiB (one fits a node) and of 400 MiB (two do).
  nodeId = await nodeOfOneGiB("one");
  for (const [name, mib] of [
    [profile, 600],
    [`${profile}-small`, 400],
  ] as const) {
    await t.db.prisma.runtimeProfile.create({
      data: { name, engine: "openai-http", contextSize: 0, threads: 0, memoryBytes: BigInt(mib * MiB), contentHash: "h" },
    });
  }
  await t.db.prisma.storedArtifact.create({
    data: { repository: served.repository, commit: served.commit, path: "m.gguf", sizeBytes: 1n, sha256: "0".repeat(64) },
  });
}, 60_000);

/** A node of 1 GiB of memory, its own by the label `room`. */
async function nodeOfOneGiB(room: string): Promise<string> {
  const id = randomUUID();
  await placeableNode(t.db.prisma, {
    id,
    name: `room-${room}`,
    labels: { room },
    at: now,
    memoryBytes: 1024 * MiB,
    engines: ["openai-http"],
  });
  return id;
}

/** A deployment of one replica on nodes labelled `room`, created and waiting to be placed. */
async function pendingDeployment(room: string): Promise<string> {
  const id = randomUUID();
  await t.db.prisma.deployment.create({
    data: { id, name: `d-${id.slice(0, 8)}`, state: "pending", targetRoot: "/srv", selector: { room }, priority: 1, ...served },
  });
  await t.db.prisma.deploymentInstance.create({ data: { deploymentId: id, revision: 1n, replica: 0, phase: "pending", ...served } });
  return id;
}

/** An autoscaled deployment whose one replica is ready on the node, idle for a minute. */
async function idleReplica(on: string): Promise<string> {
  const id = randomUUID();
  const data = { ...served, runtimeProfile: `${profile}-small` };
  const idleSince = new Date(now - 60_000);
  await t.db.prisma.deployment.create({
    data: { id, name: `idle-${id.slice(0, 8)}`, state: "ready", targetRoot: "/srv", autoscale: true, maxReplicas: 1, ...data },
  });
  await t.db.prisma.deploymentInstance.create({
    data: { deploymentId: id, revision: 1n, replica: 0, nodeId: on, phase: "ready", runtimeId: "rt", updatedAt: idleSince, ...data },
  });
  return id;
}

describe("two placements from one snapshot", () => {
  it("keeps the room the other took: the later pass reads the fleet again and leaves its replica pending", async () => {
    const mine = await pendingDeployment("one");
    const theirs = await pendingDeployment("one");
    // The other pass stores its placement once this pass has read the fleet (the files' sum is
    // the snapshot's last read) and before this pass stores its own.
    let raced = false;
    const prisma = wrapped("storedArtifact", "aggregate", async (call, args) => {
      const read = await call(args);
      if (!raced) {
        raced = true;
        await t.db.prisma.deploymentInstance.updateMany({
          where: { deploymentId: theirs, replica: 0 },
          data: { nodeId, phase: "loading", step: "acquire" },
        });
      }
      return read;
    });
    const started: string[] = [];
    const controller = new DeploymentController({
      prisma: prisma as typeof t.db.prisma,
      clock: new ManualClock(now),
      log: pino({ level: "silent" }),
      jobs: { createJob: async (input) => started.push(input.nodeId) },
    });
    await controller.reconcile(mine);
    expect(raced).toBe(true);
    const onNode = await t.db.prisma.deploymentInstance.findMany({ where: { nodeId }, select: { deploymentId: true } });
    expect(onNode.map((i) => i.deploymentId)).toEqual([theirs]);
    const replica = await t.db.prisma.deploymentInstance.findFirstOrThrow({ where: { deploymentId: mine } });
    expect(replica.phase).toBe("pending");
    expect(replica.reason).toBe("no node fits: 1 online; 1 has 424.0 MiB of memory free, needs 600.0 MiB");
    expect(started).toEqual([]);
  });
});

describe("two passes that would evict for one pending replica", () => {
  it("evict one idle replica: the pass whose view predates the first eviction leaves the room to it", async () => {
    // Two idle replicas of 400 MiB fill the node past room for a third of 600; evicting either makes room.
    const node = await nodeOfOneGiB("two");
    const idle = [await idleReplica(node), await idleReplica(node)];
    const mine = await pendingDeployment("two");
    let second: Promise<void> | undefined;
    let first: Promise<void> | undefined;
    let secondAtCandidates: () => void = () => {};
    const secondReached = new Promise<void>((resolve) => {
      secondAtCandidates = resolve;
    });
    let candidateReads = 0;
    // Eviction's candidates are the ready replicas without a job. The first pass holds its read
    // until the second pass, started then, has read the fleet and come to its own; the second's
    // read waits for the first pass to end, so it finds the first's victim scaled away while its
    // view of the node still shows it holding room.
    const prisma = wrapped("deploymentInstance", "findMany", async (call, args) => {
      const where = (args as { where?: { phase?: unknown; jobId?: unknown } }).where;
      if (where?.phase !== "ready" || where.jobId !== null) return call(args);
      candidateReads += 1;
      if (candidateReads === 1) {
        second = controller.reconcile(mine);
        await secondReached;
      } else if (candidateReads === 2) {
        secondAtCandidates();
        await first;
      }
      return call(args);
    });
    const controller = new DeploymentController({
      prisma: prisma as typeof t.db.prisma,
      clock: new ManualClock(now),
      log: pino({ level: "silent" }),
      jobs: { createJob: async () => undefined },
      eviction: { idleAfterMs: 1_000, reportStaleMs: 3_000 },
    });
    first = controller.reconcile(mine);
    await first;
    await second;
    expect(candidateReads).toBeGreaterThanOrEqual(2);
    const replicas = await t.db.prisma.deployment.findMany({ where: { id: { in: idle } }, select: { replicas: true } });
    expect(replicas.map((r) => r.replicas).sort()).toEqual([0, 1]);
    const audits = await t.db.prisma.auditEvent.count({ where: { action: "deployment.evicted", targetId: { in: idle } } });
    expect(audits).toBe(1);
  });
});
