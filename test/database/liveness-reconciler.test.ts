// The liveness reconciler over a real database with a fleet larger than one statement's batch:
// every node moves pending -> online -> stale -> offline, each transition audited exactly once,
// also with two replicas reconciling the same database (PostgreSQL). Time is a manual clock the
// replicas share: each tick is one round of their loops, so a busy machine cannot skip a state.
import { afterAll, describe, expect, it } from "vitest";
import { randomUUID } from "node:crypto";
import { startTestServer, type TestServer } from "../support/server.js";
import { testBackend } from "../support/db.js";
import { ManualClock } from "../../common/clock.js";

const servers: TestServer[] = [];
afterAll(async () => {
  for (const s of servers) await s.stop();
});

const thresholds = { MODELFORGE_STALE_AFTER: "1500ms", MODELFORGE_OFFLINE_AFTER: "3s" };
/** More than the reconciler's batch of 1,000, so a transition spans two statements. */
const fleet = 1200;

async function reconcileFleet(replicas: TestServer[], clock: ManualClock) {
  const prisma = replicas[0]!.server.db.prisma;
  const ids = Array.from({ length: fleet }, () => randomUUID());
  // Heard from just now through some replica's flush: the reconcilers take it from here.
  await prisma.node.createMany({ data: ids.map((id, i) => ({ id, name: `fleet-${i}`, lastHeartbeatAt: new Date(clock.now()) })) });
  const countIn = (liveness: string) => prisma.node.count({ where: { id: { in: ids }, liveness } });
  await clock.tick(100);
  expect(await countIn("online")).toBe(fleet);
  await clock.tick(1500); // 1.6 s since the heartbeat: stale
  expect(await countIn("stale")).toBe(fleet);
  await clock.tick(1500); // 3.1 s: offline
  expect(await countIn("offline")).toBe(fleet);
  const audits = await prisma.auditEvent.findMany({
    where: { targetId: { in: ids } },
    select: { targetId: true, action: true, details: true },
  });
  const perNode = new Map<string, string[]>();
  for (const a of audits) perNode.set(a.targetId, [...(perNode.get(a.targetId) ?? []), a.action]);
  expect(perNode.size).toBe(fleet);
  for (const actions of perNode.values()) expect(actions.sort()).toEqual(["node.offline", "node.online", "node.stale"]);
  expect(audits.find((a) => a.action === "node.stale")?.details).toEqual({ from: "online", to: "stale" });
}

describe("liveness reconciler", () => {
  it("moves a fleet in batches, auditing each node's every transition exactly once", async () => {
    const clock = new ManualClock();
    const ts = await startTestServer(thresholds, { clock });
    servers.push(ts);
    await reconcileFleet([ts], clock);
  });

  it.skipIf(testBackend() !== "postgres")("audits each transition once when two replicas reconcile the same database", async () => {
    const clock = new ManualClock();
    const first = await startTestServer(thresholds, { clock });
    servers.push(first);
    const second = await startTestServer({ ...thresholds, DATABASE_URL: first.config.databaseUrl! }, { clock });
    servers.push(second);
    await reconcileFleet([first, second], clock);
  });
});
