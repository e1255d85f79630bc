// Two controller passes racing over one deployment take its locks in one order (issue #35). A
// placement holds the deployment's row and then writes the replica it places; a move that wrote the
// replica first and then needed the deployment's row (its event's foreign key) deadlocked with it.
// Seen in CI as an `internal` answer to a ScaleDeployment while another control plane placed the
// replica that scale was taking away. PostgreSQL only: PGlite runs one transaction at a time.
import { randomUUID } from "node:crypto";
import { Writable } from "node:stream";
import pg from "pg";
import { pino } from "pino";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ManualClock } from "../../../common/clock.js";
import { DeploymentController } from "../../../server/deployments/controller.js";
import { testBackend, useTestDatabase } from "../../support/db.js";
import { waitFor } from "../../support/wait.js";

describe.skipIf(testBackend() !== "postgres")("deployment locks", () => {
  const t = useTestDatabase();
  let placing: pg.Client;
  let nodeId: string;
  const now = Date.parse("2026-12-05T00:00:00Z");

  beforeAll(async () => {
    nodeId = randomUUID();
    await t.db.prisma.node.create({ data: { id: nodeId, name: "lock-order", lastHeartbeatAt: new Date(now), sessionReplica: "r1" } });
    placing = new pg.Client({ connectionString: t.databaseUrl });
    await placing.connect();
  }, 60_000);

  afterAll(async () => {
    await placing?.end();
  });

  it("a move waits for the deployment a placement holds before it writes the replica, so neither deadlocks", async () => {
    // Scaled to 0 while replica 0 still waits to be placed: the pass moves it to unloaded.
    const id = randomUUID();
    await t.db.prisma.deployment.create({ data: { id, name: `d-${id.slice(0, 8)}`, desired: "serving", replicas: 0, state: "pending" } });
    await t.db.prisma.deploymentInstance.create({
      data: { deploymentId: id, revision: 1n, replica: 0, runtimeProfile: "p", repository: "r", commit: "c", phase: "pending" },
    });
    const failures: string[] = [];
    const log = pino(
      { level: "error" },
      new Writable({
        write(line, _enc, done) {
          failures.push(String(line));
          done();
        },
      }),
    );
    const controller = new DeploymentController({
      prisma: t.db.prisma,
      clock: new ManualClock(now),
      log,
      jobs: {
        createJob: () => {
          throw new Error("no step starts here");
        },
      },
    });

    // Another control plane's placement: the deployment's row first, as the controller's own does.
    await placing.query("BEGIN");
    await placing.query(`SELECT id FROM "Deployment" WHERE id = $1::uuid FOR UPDATE`, [id]);
    // The sweep's pass, which plans from the rows it read before any lock (an explicit reconcile
    // settles the state first, under the deployment's row, so its pass would read after the placement).
    const pass = controller.sweep();
    const waiting = async () =>
      (
        await placing.query<{ n: number }>(
          `SELECT count(*)::int AS n FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock' AND pid <> pg_backend_pid()`,
        )
      ).rows[0]!.n > 0;
    await waitFor(waiting, { timeout: 30_000, what: "the pass waiting on the placement's lock" });
    // The placement writes the replica it chose. Had the move locked the replica before waiting,
    // this would wait on it, and PostgreSQL would abort one of the two after deadlock_timeout.
    const placed = await placing.query(
      `UPDATE "DeploymentInstance" SET phase = 'loading', step = 'acquire', "nodeId" = $2::uuid WHERE "deploymentId" = $1::uuid AND replica = 0 AND phase = 'pending'`,
      [id, nodeId],
    );
    expect(placed.rowCount).toBe(1);
    await placing.query("COMMIT");
    await pass;

    expect(failures).toEqual([]);
    // The move, let through once the placement committed, found the replica placed and wrote nothing
    // over it; reading it again, the pass took it down from where the placement left it.
    const replica = await t.db.prisma.deploymentInstance.findFirstOrThrow({ where: { deploymentId: id } });
    expect(replica.phase).toBe("unloaded");
    const events = await t.db.prisma.deploymentEvent.findMany({ where: { deploymentId: id }, orderBy: { seq: "asc" } });
    expect(events.map((e) => [e.fromPhase, e.toPhase])).toEqual([["loading", "unloaded"]]);
  });
});
