// Which nodes the reclaim sweep looks at (server/jobs/expiry.ts unreachableWithWork), on a real
// database: unreachable by their stored heartbeat, not decommissioned, and holding leased jobs
// (their deployment replicas are the deployment controller's to move); each once, in a stable
// order, at most `limit`.
import { describe, expect, it } from "vitest";
import { randomUUID } from "node:crypto";
import { unreachableWithWork } from "../../server/jobs/expiry.js";
import { useTestDatabase } from "../support/db.js";

const t = useTestDatabase();

const cutoff = new Date("2026-12-02T12:00:00.000Z");
const before = new Date(cutoff.getTime() - 60_000);
const after = new Date(cutoff.getTime() + 1_000);

interface NodeCase {
  heard: Date | null;
  decommissioned?: boolean;
  jobs?: string[];
  deployments?: string[];
}

async function node(name: string, c: NodeCase): Promise<string> {
  const id = randomUUID();
  await t.db.prisma.node.create({
    data: { id, name, lastHeartbeatAt: c.heard, ...(c.decommissioned ? { decommissionedAt: before } : {}) },
  });
  for (const state of c.jobs ?? [])
    await t.db.prisma.job.create({ data: { id: randomUUID(), nodeId: id, capability: "runtime.health.v1", spec: {}, state } });
  for (const state of c.deployments ?? [])
    await t.db.prisma.deployment.create({ data: { id: randomUUID(), name: `${name}-${state}-${randomUUID()}`, nodeId: id, state } });
  return id;
}

describe("the reclaim sweep's candidates", () => {
  it("are the unreachable nodes with leased jobs, each once", async () => {
    const cases: Record<string, NodeCase & { listed: boolean }> = {
      "leased job, silent": { heard: before, jobs: ["leased"], listed: true },
      "two leased jobs and a ready deployment, silent": { heard: before, jobs: ["leased", "leased"], deployments: ["ready"], listed: true },
      "loading deployment only, silent": { heard: before, deployments: ["loading"], listed: false },
      "draining deployment only, silent": { heard: before, deployments: ["draining"], listed: false },
      "finished and waiting work only, silent": {
        heard: before,
        jobs: ["pending", "succeeded", "failed", "cancelled"],
        deployments: ["unloaded", "failed"],
        listed: false,
      },
      "leased job, heard after the cutoff": { heard: after, jobs: ["leased"], listed: false },
      "leased job, heard exactly at the cutoff": { heard: cutoff, jobs: ["leased"], listed: false },
      "leased job, decommissioned": { heard: before, decommissioned: true, jobs: ["leased"], listed: false },
      "leased job, never heard from": { heard: null, jobs: ["leased"], listed: false },
      "no work, silent": { heard: before, listed: false },
    };
    const ids = new Map<string, string>();
    for (const [name, c] of Object.entries(cases)) ids.set(name, await node(name.replace(/\W+/g, "-"), c));

    const listed = await unreachableWithWork(t.db.prisma, cutoff, 100);
    const expected = Object.entries(cases)
      .filter(([, c]) => c.listed)
      .map(([name]) => ids.get(name)!)
      .sort();
    expect(listed.map((n) => n.id)).toEqual(expected);
    for (const n of listed) expect(n.lastHeartbeatAt?.getTime()).toBe(before.getTime());

    // Bounded, and the same first ones each time.
    expect((await unreachableWithWork(t.db.prisma, cutoff, 2)).map((n) => n.id)).toEqual(expected.slice(0, 2));
  });
});
