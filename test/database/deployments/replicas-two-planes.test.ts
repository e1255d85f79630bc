// Two control planes on one PostgreSQL database place, re-place and scale one deployment's replicas
// at once (issue #35): each replica is placed exactly once, on its own node, however many passes of
// both controllers race over it. Four nodes with scripted in-process agents (two holding their
// Session on A, two on B); every ScaleDeployment runs its server's controller over the deployment
// before answering, so one sent through A and one through B at the same moment are two controllers
// reconciling it concurrently (beside the leader's sweep). A sampler reads the instances all along:
// no node ever holds two replicas of the revision. Passes started together place in lock step (each
// loses the same slot to the first), so the last case starts B's passes once A's has placed one:
// without the re-check under the deployment's lock it puts two replicas on one node within a few
// rounds. PostgreSQL only: replicas need it.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createHash } from "node:crypto";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import pg from "pg";
import { EngineKind } from "../../../gen/proto/modelforge/jobs/v1/jobs_pb.js";
import { DeploymentState } from "../../../gen/proto/modelforge/deployment/v1/deployment_pb.js";
import { tinyLlamaGguf } from "../../../scripts/gguf.js";
import { createTestDatabase, testBackend, type TestDatabase } from "../../support/db.js";
import { startTwoPlanes, type TestServer } from "../../support/server.js";
import { enrollTestNode, eventually, type TestNode } from "../../support/node.js";
import { scriptedDeploymentAgent } from "../../support/scripted-agent.js";
import { startAgent, type InProcessAgent } from "../../support/agent.js";
import { telemetryArrived } from "../../support/serving.js";
import { waitFor } from "../../support/wait.js";

const GiB = 2 ** 30;
const repository = "acme/replicated";
const commit = "d".repeat(40);
const name = "fleet";

interface Row {
  replica: number;
  nodeId: string | null;
  phase: string;
}

describe.skipIf(testBackend() !== "postgres")("replicas placed by two control planes on one database", () => {
  let db: TestDatabase;
  let a: TestServer;
  let b: TestServer;
  let root: string;
  let sql: pg.Client;
  let deploymentId: string;
  const nodes: TestNode[] = [];
  const agents: InProcessAgent[] = [];
  /** Every moment the sampler saw a node holding two replicas of one revision. */
  const doubled: string[] = [];
  let watch: pg.Client;
  let sampling: NodeJS.Timeout | undefined;
  let stopSampling = false;

  const instances = async (): Promise<Row[]> =>
    (
      await sql.query<Row>(
        `SELECT replica, "nodeId"::text AS "nodeId", phase FROM "DeploymentInstance" WHERE "deploymentId" = $1::uuid ORDER BY replica`,
        [deploymentId],
      )
    ).rows;

  const audited = async (action: string) =>
    (await a.admin.listAuditEvents({ action, targetId: deploymentId, pageSize: 1000 })).events.map((e) => e.details);

  /** Both servers' controllers over the deployment at once, twice each, until `done` holds. */
  async function bothReconcileUntil<T>(replicas: number, done: () => Promise<T | undefined | false>, what: string): Promise<T> {
    return eventually(
      async () => {
        await Promise.all([a, b, a, b].map((s) => s.admin.scaleDeployment({ deployment: name, replicas })));
        return done();
      },
      90_000,
      what,
    );
  }

  /** Settled at `replicas`: that many READY, one per slot below it, on distinct nodes; the rest unloaded. */
  async function settledAt(replicas: number): Promise<Row[] | undefined> {
    const r = (await a.admin.getDeployment({ deployment: name })).deployment!;
    if (r.deployment!.state !== DeploymentState.READY || r.readyReplicas !== replicas) return undefined;
    const rows = await instances();
    const serving = rows.filter((i) => i.phase !== "unloaded");
    if (serving.length !== replicas || !serving.every((i) => i.phase === "ready" && i.replica < replicas)) return undefined;
    return serving;
  }

  beforeAll(async () => {
    root = mkdtempSync(join(tmpdir(), "mf-two-planes-"));
    db = await createTestDatabase("postgres");
    [a, b] = await startTwoPlanes(db.databaseUrl!, root);
    for (const [i, server] of [a, a, b, b].entries()) {
      const node = await enrollTestNode(server, `node-${i}`);
      await a.admin.updateNode({ nodeId: node.nodeId, labels: { pool: "cpu" }, updateMask: { paths: ["labels"] } });
      nodes.push(node);
      agents.push(await startAgent(node, scriptedDeploymentAgent(8 * GiB, ["llama.cpp"])));
    }
    for (const node of nodes) await telemetryArrived(a.admin, node.nodeId);
    // Two Sessions on each server, as the other one sees them.
    expect(nodes.map((n) => a.server.sessionsConnected(n.nodeId))).toEqual([true, true, false, false]);
    expect(nodes.map((n) => b.server.sessionsConnected(n.nodeId))).toEqual([false, false, true, true]);
    await a.admin.createRuntimeProfile({ name: "ctx-1k", engine: EngineKind.LLAMA_CPP, contextSize: 1024 });
    const data = tinyLlamaGguf().bytes;
    const sha256 = createHash("sha256").update(data).digest("hex");
    await a.admin.uploadArtifactChunk({ repository, commit, path: "tiny.gguf", sizeBytes: BigInt(data.length), sha256, offset: 0n, data });
    sql = new pg.Client({ connectionString: db.databaseUrl });
    await sql.connect();
    watch = new pg.Client({ connectionString: db.databaseUrl });
    await watch.connect();
  }, 180_000);

  afterAll(async () => {
    stopSampling = true;
    clearTimeout(sampling);
    await watch?.end();
    await sql?.end();
    for (const agent of agents) await agent.stop();
    await b?.stop();
    await a?.stop();
    await db?.cleanup();
    if (root) rmSync(root, { recursive: true, force: true });
  });

  it("places 3 replicas exactly once each, on 3 nodes, while both controllers reconcile", async () => {
    const created = await a.admin.createDeployment({
      name,
      selector: { pool: "cpu" },
      runtimeProfile: "ctx-1k",
      repository,
      commit,
      targetRoot: root,
      replicas: 0,
    });
    deploymentId = created.deployment!.deployment!.id;
    // Sampled from here to the end on a connection of its own (an invariant, not a wait):
    // holding = loading, ready or draining.
    const sample = async () => {
      const r = await watch.query<{ nodeId: string; n: string }>(
        `SELECT "nodeId"::text AS "nodeId", count(*) AS n FROM "DeploymentInstance"
          WHERE "deploymentId" = $1::uuid AND phase IN ('loading', 'ready', 'draining')
          GROUP BY revision, "nodeId" HAVING count(*) > 1`,
        [deploymentId],
      );
      doubled.push(...r.rows.map((x) => `${x.n} replicas on node ${x.nodeId}`));
      if (!stopSampling) sampling = setTimeout(() => void sample().catch(() => undefined), 25);
    };
    await sample();
    // Scaled from 0 through both servers at once: six controller passes race to place the same replicas.
    await Promise.all([a, b, a, b, a, b].map((s) => s.admin.scaleDeployment({ deployment: name, replicas: 3 })));
    const ready = await bothReconcileUntil(3, () => settledAt(3), "3 replicas READY");
    expect(new Set(ready.map((i) => i.nodeId)).size).toBe(3);
    expect(ready.map((i) => i.replica)).toEqual([0, 1, 2]);
    const placed = await audited("deployment.replica_placed");
    expect(placed.map((d) => d.replica).sort()).toEqual(["0", "1", "2"]);
    expect(await audited("deployment.replica_unplaced")).toEqual([]);
    expect(doubled).toEqual([]);
  }, 150_000);

  it("re-places the replica of a disabled node exactly once, onto the free node", async () => {
    const before = await instances();
    const lost = before.find((i) => i.replica === 1)!;
    const free = nodes.map((n) => n.nodeId).find((id) => !before.some((i) => i.nodeId === id))!;
    await Promise.all([
      b.admin.disableNode({ nodeId: lost.nodeId!, reason: "maintenance" }),
      a.admin.scaleDeployment({ deployment: name, replicas: 3 }),
      b.admin.scaleDeployment({ deployment: name, replicas: 3 }),
    ]);
    const ready = await bothReconcileUntil(
      3,
      async () => {
        const rows = await settledAt(3);
        return rows?.find((i) => i.replica === 1)?.nodeId === free ? rows : undefined;
      },
      `replica 1 re-placed on node ${free} and READY`,
    );
    expect(new Set(ready.map((i) => i.nodeId)).size).toBe(3);
    expect(ready.map((i) => i.nodeId)).not.toContain(lost.nodeId);
    // The other two never moved.
    for (const i of before.filter((x) => x.replica !== 1)) expect(ready.find((x) => x.replica === i.replica)!.nodeId).toBe(i.nodeId);
    const unplaced = await audited("deployment.replica_unplaced");
    expect(unplaced.map((d) => [d.replica, d.nodeId])).toEqual([["1", lost.nodeId]]);
    const placed = await audited("deployment.replica_placed");
    expect(placed).toHaveLength(4);
    expect(placed.filter((d) => d.replica === "1").map((d) => d.nodeId)).toEqual([free, lost.nodeId]);
    expect(doubled).toEqual([]);
    await a.admin.enableNode({ nodeId: lost.nodeId! });
  }, 150_000);

  it("ends concurrent scales through A and B at one of the values asked, the instances matching it", async () => {
    // Each round: A and B scale to different counts at the same moment; the last write wins.
    for (const [viaA, viaB] of [
      [1, 4],
      [4, 1],
      [2, 4],
      [4, 2],
      [1, 3],
    ] as const) {
      await Promise.all(
        [a, b, a, b, a, b].map((s, i) => s.admin.scaleDeployment({ deployment: name, replicas: i % 2 === 0 ? viaA : viaB })),
      );
      const wanted = (await a.admin.getDeployment({ deployment: name })).deployment!.desiredReplicas;
      expect([viaA, viaB]).toContain(wanted);
      const ready = await bothReconcileUntil(
        wanted,
        () => settledAt(wanted),
        `${wanted} replicas READY after scaling to ${viaA} and ${viaB}`,
      );
      expect(new Set(ready.map((i) => i.nodeId)).size).toBe(wanted);
      expect(ready.map((i) => i.replica)).toEqual([...Array(wanted).keys()]);
    }
    // Every placement audited matches one stored move out of PENDING, and none landed twice at once.
    const placements = await sql.query<{ n: string }>(
      `SELECT count(*) AS n FROM "DeploymentEvent" WHERE "deploymentId" = $1::uuid AND "fromPhase" = 'pending' AND "toPhase" = 'loading'`,
      [deploymentId],
    );
    expect(await audited("deployment.replica_placed")).toHaveLength(Number(placements.rows[0]!.n));
    expect(doubled).toEqual([]);
  }, 300_000);

  it("places 4 replicas on the 4 nodes, one each, round after round of passes racing from 0", async () => {
    for (let round = 0; round < 6; round++) {
      await bothReconcileUntil(
        0,
        async () => (await instances()).every((i) => i.phase === "unloaded"),
        `every replica unloaded (round ${round})`,
      );
      // A's pass places the replicas one after another; B's passes start once the first is placed,
      // so they place a sibling while A places the next: a node one chose may be the node the
      // other chooses.
      const placedByA = () => a.logs().split("deployment replica placed").length;
      const before = placedByA();
      const viaA = a.admin.scaleDeployment({ deployment: name, replicas: 4 });
      await waitFor(() => placedByA() > before, { on: a.logFeed, timeout: 30_000, what: `A's first placement (round ${round})` });
      await Promise.all([viaA, ...[b, b, b, b].map((s) => s.admin.scaleDeployment({ deployment: name, replicas: 4 }))]);
      const ready = await bothReconcileUntil(4, () => settledAt(4), `4 replicas READY (round ${round})`);
      expect(new Set(ready.map((i) => i.nodeId)).size).toBe(4);
      expect(doubled).toEqual([]);
    }
  }, 400_000);

  it("keeps a scale that races a StartDeployment of the serving deployment", async () => {
    // Start on a serving deployment changes nothing it wants: if both answer OK, the scale stands.
    for (let round = 0; round < 20; round++) {
      const target = 1 + (round % 2);
      const [started, scaled] = await Promise.allSettled([
        a.admin.startDeployment({ deployment: name }),
        b.admin.scaleDeployment({ deployment: name, replicas: target }),
      ]);
      if (started.status === "fulfilled" && scaled.status === "fulfilled") {
        expect((await a.admin.getDeployment({ deployment: name })).deployment!.desiredReplicas, `round ${round}`).toBe(target);
      }
    }
  }, 120_000);
});
