// What the control plane's once-a-second loops cost a fleet at rest: each loop's statements timed
// through the server's own functions on a real database holding NODES nodes, each with a
// credential, a fresh heartbeat and a deployment serving from a ready instance, and LEASED leased
// jobs spread over them. A loop whose cost grows with the fleet rather than with what changed is
// paid every second by every replica (or by the leader), so this is where it shows.
//
//   npx tsx bench/sweeps.ts   (NODES=5050, LEASED=0, ROUNDS=20, RUNS=3, BENCH_DB=postgres|pglite)
//
// Printed per loop: the mean wall time of one call over ROUNDS calls, median (range) of RUNS runs,
// with this process's CPU per call (Prisma's own work; the rest is the database's); beside them
// the floor measured in the same run (a Prisma round trip, SELECT 1) and the load average.
import { loadavg } from "node:os";
import { openDatabase } from "../server/db/client.js";
import { loadConfig } from "../server/config.js";
import { createLogger } from "../server/observability/logger.js";
import { reconcileLiveness } from "../server/liveness/reconciler.js";
import { revokedSessionSweeper } from "../server/sessions/revocation.js";
import { DeploymentController } from "../server/deployments/controller.js";
import { createTestDatabase, type TestBackend } from "../test/support/db.js";
import { ms, numParam, param } from "./support/stats.js";
import { loopDeps } from "./support/loop-deps.js";
import { Code, ConnectError } from "@connectrpc/connect";

const NODES = numParam("NODES", 5050);
const LEASED = numParam("LEASED", 0);
const ROUNDS = Math.max(1, numParam("ROUNDS", 20));
const RUNS = Math.max(1, numParam("RUNS", 3));
const backend = param("BENCH_DB", "postgres") as TestBackend;

const t = await createTestDatabase(backend);
const db = await openDatabase({ databaseUrl: t.databaseUrl, dataDir: t.dataDir, log: createLogger("error") });
const { prisma } = db;
const config = loadConfig({});
try {
  const started = performance.now();
  // The fleet, in a few set-based statements: nodes online with a fresh heartbeat, a credential
  // each, a deployment each serving revision 1 from a ready instance, leased jobs on random nodes.
  await prisma.$executeRaw`
    INSERT INTO "Node" (id, name, "updatedAt", "lastHeartbeatAt", liveness)
    SELECT gen_random_uuid(), 'bench-' || g, now(), now(), 'online' FROM generate_series(1, ${NODES}::int) AS g`;
  await prisma.$executeRaw`
    INSERT INTO "NodeCredential" (serial, "nodeId", "expiresAt")
    SELECT upper(md5(id::text)), id, now() + interval '1 day' FROM "Node"`;
  await prisma.$executeRaw`
    INSERT INTO "Deployment" (id, name, "nodeId", state, "updatedAt", repository, commit)
    SELECT gen_random_uuid(), 'bench-' || id, id, 'ready', now(), 'org/model', 'main' FROM "Node"`;
  await prisma.$executeRaw`
    INSERT INTO "DeploymentInstance" ("deploymentId", revision, "nodeId", "runtimeProfile", repository, commit, phase, "runtimeId")
    SELECT id, 1, "nodeId", '', repository, commit, 'ready', 'runtime-' || id FROM "Deployment"`;
  await prisma.$executeRaw`
    INSERT INTO "Job" (id, "nodeId", capability, spec, state, attempt, "updatedAt", "leaseExpiresAt")
    SELECT gen_random_uuid(), (SELECT id FROM "Node" OFFSET floor(random() * ${NODES}::int) LIMIT 1), 'runtime.health.v1', '{}', 'leased', 1, now(), now() + interval '1 hour'
      FROM generate_series(1, ${LEASED}::int)`;
  if (db.kind === "postgres") await prisma.$executeRawUnsafe("ANALYZE");
  console.log(
    `${db.kind}: ${NODES} nodes, credentials and deployments at rest, ${LEASED} leased jobs, seeded in ${ms(performance.now() - started)} ms`,
  );

  const nodes = await prisma.node.findMany({ select: { id: true } });
  // Each node's time is written every 5 s at most: a flush a second writes about a fifth of them.
  const { clock, log, sessions, heartbeats, liveness, engine, shutdown } = loopDeps(
    prisma,
    config,
    nodes.map((n) => ({ nodeId: n.id, serial: "" })),
    5_000,
  );
  const deployments = new DeploymentController({
    prisma,
    clock,
    log,
    jobs: { createJob: () => Promise.reject(new Error("a deployment at rest starts no job")) },
  });
  let fifth = 0;
  const loops: [string, () => Promise<unknown>][] = [
    ["floor: Prisma round trip (SELECT 1)", () => prisma.$queryRaw`SELECT 1`],
    [
      "heartbeat flush, a fifth of the fleet",
      () => {
        const now = Date.now();
        for (let i = fifth % 5; i < nodes.length; i += 5) heartbeats.record(nodes[i]!.id, now + fifth * 5_000);
        fifth++;
        return heartbeats.flush(db.direct);
      },
    ],
    ["liveness reconciler (leader)", () => reconcileLiveness({ prisma, clock, liveness, log })],
    ["revoked-session sweep (every replica)", revokedSessionSweeper({ prisma, clock, sessions })],
    ["jobs sweep (leader: expiry, reclaim, push)", () => engine.sweep(true)],
    ["deployments pass (leader)", () => deployments.sweep()],
  ];
  const results = new Map<string, { wall: number[]; cpu: number[] }>();
  for (let run = 0; run < RUNS; run++) {
    for (const [name, fn] of loops) {
      await fn();
      const cpu = process.cpuUsage();
      const t0 = performance.now();
      for (let i = 0; i < ROUNDS; i++) await fn();
      const wall = (performance.now() - t0) / ROUNDS;
      const used = process.cpuUsage(cpu);
      const r = results.get(name) ?? { wall: [], cpu: [] };
      r.wall.push(wall);
      r.cpu.push((used.user + used.system) / 1000 / ROUNDS);
      results.set(name, r);
    }
  }
  const spread = (v: number[]) => {
    const s = [...v].sort((a, b) => a - b);
    return `${ms(s[Math.floor((s.length - 1) / 2)]!)} (${ms(s[0]!)}-${ms(s[s.length - 1]!)})`;
  };
  console.log(
    `\nms per call, median (range) of ${RUNS} runs of ${ROUNDS} calls; load average ${loadavg()
      .map((l) => l.toFixed(2))
      .join(" ")}`,
  );
  for (const [name, r] of results) console.log(`  ${name.padEnd(44)} ${spread(r.wall).padEnd(22)} this process's CPU ${spread(r.cpu)}`);
  sessions.closeAll(new ConnectError("bench over", Code.Canceled));
  shutdown.abort();
} finally {
  await db.close();
  await t.cleanup();
}
