// The liveness reconciler over a real database with a fleet larger than one statement's batch:
// every node moves pending -> online -> stale -> offline, each transition audited exactly once,
// also with two replicas reconciling the same database (PostgreSQL).
import { afterAll, describe, expect, it } from "vitest";
import { randomUUID } from "node:crypto";
import { startTestServer, type TestServer } from "./support/server.js";
import { testBackend } from "./support/db.js";
import { anyOf, waitFor } from "./support/wait.js";

const servers: TestServer[] = [];
afterAll(async () => {
  for (const s of servers) await s.stop();
});

// Each state lasts seconds, so a reconciler pass delayed by a busy machine still sees it (with
// 1.5 s, the fleet went from pending straight to stale under load).
const thresholds = { MODELFORGE_STALE_AFTER: "4s", MODELFORGE_OFFLINE_AFTER: "7s" };
/** More than the reconciler's batch of 1,000, so a transition spans two statements. */
const fleet = 1200;

/** Counts the replicas' "node liveness changed" log lines into `to`: one per node the reconciler moved. */
function moves(replicas: TestServer[], to: string): () => number {
  const line = new RegExp(`"to":"${to}"[^\\n]*"msg":"node liveness changed"`, "g");
  let n = 0;
  for (const r of replicas) r.logFeed.subscribe((chunk) => (n += chunk.match(line)?.length ?? 0));
  return () => n;
}

async function reconcileFleet(replicas: TestServer[]) {
  const prisma = replicas[0]!.server.db.prisma;
  const ids = Array.from({ length: fleet }, () => randomUUID());
  const online = moves(replicas, "online");
  const stale = moves(replicas, "stale");
  const offline = moves(replicas, "offline");
  const progress = () => `${online()} online, ${stale()} stale, ${offline()} offline of ${fleet}`;
  const logs = anyOf(...replicas.map((r) => r.logFeed));
  await prisma.node.createMany({ data: ids.map((id, i) => ({ id, name: `fleet-${i}` })) });
  // Heard from just now through some replica's flush (one statement, as a flush is; the slow insert
  // above must not eat into the online state): the reconcilers take it from here.
  await prisma.node.updateMany({ where: { id: { in: ids } }, data: { lastHeartbeatAt: new Date() } });
  const countIn = (liveness: string) => prisma.node.count({ where: { id: { in: ids }, liveness } });
  // Each move is logged after its transaction (with its audit event) commits.
  await waitFor(() => online() >= fleet, { on: logs, what: () => `the fleet online (${progress()})` });
  await waitFor(() => offline() >= fleet, { on: logs, what: () => `the fleet offline (${progress()})` });
  expect(await countIn("offline")).toBe(fleet);
  const audits = await prisma.auditEvent.findMany({ where: { targetId: { in: ids } }, select: { targetId: true, action: true, details: true } });
  const perNode = new Map<string, string[]>();
  for (const a of audits) perNode.set(a.targetId, [...(perNode.get(a.targetId) ?? []), a.action]);
  expect(perNode.size).toBe(fleet);
  for (const actions of perNode.values()) expect(actions.sort()).toEqual(["node.offline", "node.online", "node.stale"]);
  expect(audits.find((a) => a.action === "node.stale")?.details).toEqual({ from: "online", to: "stale" });
}

describe("liveness reconciler", () => {
  it("moves a fleet in batches, auditing each node's every transition exactly once", async () => {
    const ts = await startTestServer(thresholds);
    servers.push(ts);
    await reconcileFleet([ts]);
  });

  it.skipIf(testBackend() !== "postgres")("audits each transition once when two replicas reconcile the same database", async () => {
    const first = await startTestServer(thresholds);
    servers.push(first);
    const second = await startTestServer({ ...thresholds, DATABASE_URL: first.config.databaseUrl! });
    servers.push(second);
    await reconcileFleet([first, second]);
  });
});
