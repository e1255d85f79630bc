// Throughput of the two database backends through Prisma 7 (bench/README.md):
//   embedded PGlite (pglite-prisma-adapter) and PostgreSQL (@prisma/adapter-pg, pool of 10).
//
//   npx tsx bench/db-adapters.ts [--only pglite|postgres] [--upserts 2000] [--rounds 100]
//
// PostgreSQL: a throwaway database on MODELFORGE_TEST_POSTGRES_URL
// (default postgresql://postgres@127.0.0.1:5432/postgres), dropped afterwards.
//
// Measures
// - open: openDatabase on an empty database (PGlite: initdb + migrations = the first start) and
//   a reopen (every later start);
// - single-row upserts/s (GPU reconciliation shape: upsert by (nodeId, uuid)), sequential and
//   16 at a time;
// - claims: 50 callers race a conditional updateMany (state pending -> leased) on the same job;
//   exactly one must win each round. Reported as claim attempts/s and won rounds/s;
// - queue drain, naive: 50 workers each loop "findFirst a pending job, claim it with a conditional
//   updateMany" until the queue is empty. Every worker sees the same oldest job, so most claims
//   lose: reported as jobs claimed/s and lost races;
// - queue drain, SKIP LOCKED: the same 50 workers claim with one raw statement,
//   UPDATE ... WHERE id = (SELECT ... FOR UPDATE SKIP LOCKED LIMIT 1) RETURNING id.
import { randomUUID } from "node:crypto";
import { parseArgs } from "node:util";
import { openDatabase, type Database } from "../server/db/client.js";
import { createTestDatabase, type TestBackend, type TestDatabase } from "../test/support/db.js";

const { values: args } = parseArgs({
  options: {
    only: { type: "string" },
    upserts: { type: "string", default: "2000" },
    rounds: { type: "string", default: "100" },
  },
});
const UPSERTS = Number(args.upserts);
const ROUNDS = Number(args.rounds);
const RACERS = 50;
const QUEUE = 300;

interface Result {
  backend: string;
  openFirstMs: number;
  openAgainMs: number;
  upsertSeq: number;
  upsertConc: number;
  claimAttempts: number;
  claimRounds: number;
  drainJobs: number;
  drainLost: number;
  skipLockedJobs: number;
}

function rate(count: number, ms: number): number {
  return Math.round((count * 1000) / ms);
}

async function timed<T>(fn: () => Promise<T>): Promise<[T, number]> {
  const t = performance.now();
  const v = await fn();
  return [v, performance.now() - t];
}

async function upserts(db: Database, nodeId: string, n: number, concurrency: number): Promise<number> {
  let next = 0;
  const worker = async () => {
    for (let i = next++; i < n; i = next++) {
      const uuid = `GPU-${i % 64}`;
      await db.prisma.gpu.upsert({
        where: { nodeId_uuid: { nodeId, uuid } },
        create: {
          nodeId,
          uuid,
          index: i % 8,
          pciBusId: `0000:${(i % 64).toString(16).padStart(2, "0")}:00.0`,
          model: "H100",
          memoryTotalBytes: 85_899_345_920n,
          driverVersion: "560.35",
          vendor: "nvidia",
        },
        update: { index: i % 8, lastSeenAt: new Date(), state: "present", missingSince: null },
      });
    }
  };
  const [, ms] = await timed(() => Promise.all(Array.from({ length: concurrency }, worker)));
  return rate(n, ms);
}

async function makeJobs(db: Database, nodeId: string, n: number): Promise<string[]> {
  const ids = Array.from({ length: n }, () => randomUUID());
  await db.prisma.job.createMany({
    data: ids.map((id) => ({ id, nodeId, capability: "runtime.probe.v1", spec: { probe: {} } })),
  });
  return ids;
}

async function claimStorm(db: Database, nodeId: string): Promise<{ attempts: number; rounds: number }> {
  const ids = await makeJobs(db, nodeId, ROUNDS);
  const [, ms] = await timed(async () => {
    for (const id of ids) {
      const results = await Promise.all(
        Array.from({ length: RACERS }, () =>
          db.prisma.job.updateMany({
            where: { id, state: "pending" },
            data: { state: "leased", attempt: { increment: 1 }, leaseExpiresAt: new Date(Date.now() + 120_000) },
          }),
        ),
      );
      const won = results.filter((r) => r.count === 1).length;
      if (won !== 1) throw new Error(`claim race on ${id} was won ${won} times`);
    }
  });
  return { attempts: rate(ids.length * RACERS, ms), rounds: rate(ids.length, ms) };
}

async function drain(db: Database, nodeId: string): Promise<{ jobs: number; lost: number }> {
  await db.prisma.job.deleteMany({});
  await makeJobs(db, nodeId, QUEUE);
  let lost = 0;
  let claimed = 0;
  const worker = async () => {
    for (;;) {
      const candidate = await db.prisma.job.findFirst({
        where: { nodeId, state: "pending" },
        orderBy: { seq: "asc" },
        select: { id: true },
      });
      if (!candidate) return;
      const r = await db.prisma.job.updateMany({
        where: { id: candidate.id, state: "pending" },
        data: { state: "leased", attempt: { increment: 1 }, leaseExpiresAt: new Date(Date.now() + 120_000) },
      });
      if (r.count === 1) claimed++;
      else lost++;
    }
  };
  const [, ms] = await timed(() => Promise.all(Array.from({ length: RACERS }, worker)));
  if (claimed !== QUEUE) throw new Error(`drained ${claimed} of ${QUEUE} jobs`);
  return { jobs: rate(claimed, ms), lost };
}

async function drainSkipLocked(db: Database, nodeId: string): Promise<number> {
  await db.prisma.job.deleteMany({});
  await makeJobs(db, nodeId, QUEUE);
  let claimed = 0;
  const worker = async () => {
    for (;;) {
      // Raw SQL bypasses @updatedAt, so it is set here.
      const rows = await db.prisma.$queryRaw<{ id: string }[]>`
        UPDATE "Job" SET "state" = 'leased', "attempt" = "attempt" + 1,
               "leaseExpiresAt" = ${new Date(Date.now() + 120_000)}, "updatedAt" = now()
         WHERE "id" = (SELECT "id" FROM "Job" WHERE "nodeId" = ${nodeId}::uuid AND "state" = 'pending'
                        ORDER BY "seq" FOR UPDATE SKIP LOCKED LIMIT 1)
        RETURNING "id"`;
      if (rows.length === 0) return;
      claimed++;
    }
  };
  const [, ms] = await timed(() => Promise.all(Array.from({ length: RACERS }, worker)));
  if (claimed !== QUEUE) throw new Error(`drained ${claimed} of ${QUEUE} jobs`);
  return rate(claimed, ms);
}

async function run(backend: TestBackend): Promise<Result> {
  const tdb: TestDatabase = await createTestDatabase(backend);
  const opts = { ...(tdb.databaseUrl ? { databaseUrl: tdb.databaseUrl } : {}), dataDir: tdb.dataDir };
  try {
    const [first, openFirstMs] = await timed(() => openDatabase(opts));
    await first.close();
    const [db, openAgainMs] = await timed(() => openDatabase(opts));
    try {
      const nodeId = randomUUID();
      await db.prisma.node.create({ data: { id: nodeId, name: "bench" } });
      const upsertSeq = await upserts(db, nodeId, UPSERTS, 1);
      const upsertConc = await upserts(db, nodeId, UPSERTS, 16);
      const storm = await claimStorm(db, nodeId);
      const d = await drain(db, nodeId);
      const skipLockedJobs = await drainSkipLocked(db, nodeId);
      return {
        backend: db.kind === "pglite" ? "PGlite (pglite-prisma-adapter)" : "PostgreSQL (adapter-pg)",
        openFirstMs: Math.round(openFirstMs),
        openAgainMs: Math.round(openAgainMs),
        upsertSeq,
        upsertConc,
        claimAttempts: storm.attempts,
        claimRounds: storm.rounds,
        drainJobs: d.jobs,
        drainLost: d.lost,
        skipLockedJobs,
      };
    } finally {
      await db.close();
    }
  } finally {
    await tdb.cleanup();
  }
}

const backends: TestBackend[] = args.only === "pglite" ? ["pglite"] : args.only === "postgres" ? ["postgres"] : ["pglite", "postgres"];
const results: Result[] = [];
for (const b of backends) {
  try {
    results.push(await run(b));
  } catch (err) {
    console.error(`${b}: skipped: ${err instanceof Error ? err.message : String(err)}`);
  }
}

console.log(
  `\nNode ${process.version}; ${UPSERTS} upserts per mode, ${ROUNDS} claim rounds of ${RACERS} racers, ${QUEUE}-job drain by ${RACERS} workers\n`,
);
console.log(
  "| backend | first open ms | reopen ms | upserts/s (1) | upserts/s (16) | claim attempts/s (50-way) | claim rounds/s | naive drain jobs/s | lost races | SKIP LOCKED drain jobs/s |",
);
console.log("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
for (const r of results) {
  console.log(
    `| ${r.backend} | ${r.openFirstMs} | ${r.openAgainMs} | ${r.upsertSeq} | ${r.upsertConc} | ${r.claimAttempts} | ${r.claimRounds} | ${r.drainJobs} | ${r.drainLost} | ${r.skipLockedJobs} |`,
  );
}
