// Bench-only entry: runs one real control plane (startServer, configured from the MODELFORGE_*
// environment like server/main.ts) in its own process, so its CPU and memory can be measured
// alone, and answers the benchmark over IPC. Start with --expose-gc for "after GC" readings.
//
// BENCH_TUNING: "off" drops every option of server/tuning.ts (the untuned baseline); a JSON
// object is merged over them (settings merged key by key) to try variants without editing.
import { randomUUID } from "node:crypto";
import { monitorEventLoopDelay, performance } from "node:perf_hooks";
import { loadConfig } from "../../server/config.js";
import { createLogger } from "../../server/observability/logger.js";
import { startServer } from "../../server/app.js";
import { http2ServerTuning } from "../../server/tuning.js";
import { emit, serve } from "./ipc.js";
import { procStatus } from "./stats.js";
import { startAllocationProfile, startProfile, stopAllocationProfile, stopProfile, summarizeProfile } from "./profile.js";
import { heapSummary } from "./heap.js";
import { recordSeconds, recordStalls } from "./timeline.js";
import { loopDeps } from "./loop-deps.js";
import { reconcileLiveness } from "../../server/liveness/reconciler.js";
import { revokedSessionSweeper } from "../../server/sessions/revocation.js";
import { OpeningReads } from "../../server/sessions/open.js";
import { Code, ConnectError } from "@connectrpc/connect";

const override = process.env.BENCH_TUNING?.trim();
if (override === "off") {
  for (const k of Object.keys(http2ServerTuning)) delete (http2ServerTuning as Record<string, unknown>)[k];
} else if (override) {
  const o = JSON.parse(override) as Record<string, unknown>;
  const t = http2ServerTuning as Record<string, unknown>;
  for (const [k, v] of Object.entries(o)) {
    if (v === null) delete t[k];
    else if (k === "settings") t.settings = { ...(t.settings as object), ...(v as object) };
    else t[k] = v;
  }
}

const config = loadConfig(process.env);
const log = createLogger(config.logLevel);
const server = await startServer(config, log);
const prisma = server.db.prisma;
const loopDelay = monitorEventLoopDelay({ resolution: 5 });
loopDelay.enable();
const seconds = recordSeconds();
const stalls = recordStalls();
let elu = performance.eventLoopUtilization();
const gc = (globalThis as { gc?: () => void }).gc;
let provisioned: string[] = [];

serve({
  info: () => ({
    url: server.url,
    caPem: server.ca.certPem,
    fingerprint: server.ca.fingerprint,
    pid: process.pid,
    tuning: http2ServerTuning,
    database: server.db.describe,
  }),

  /**
   * Creates `count` enrolled nodes directly: one row per node and credential, inserted in batches,
   * each with a certificate issued by the real CA code from the one CSR given (one shared key).
   */
  async provision({ count, csrPem }: { count: number; csrPem: string }) {
    const out: { nodeId: string; certPem: string }[] = [];
    const batch = 500;
    const now = new Date();
    for (let start = 0; start < count; start += batch) {
      const nodes: { id: string; name: string }[] = [];
      const creds: { serial: string; nodeId: string; issuedAt: Date; expiresAt: Date }[] = [];
      for (let i = start; i < Math.min(count, start + batch); i++) {
        const nodeId = randomUUID();
        const issued = await server.ca.issueNodeCertificate(csrPem, nodeId, { validityMs: config.credentialTtlMs, now });
        nodes.push({ id: nodeId, name: `bench-${i}` });
        creds.push({ serial: issued.serial, nodeId, issuedAt: now, expiresAt: issued.notAfter });
        out.push({ nodeId, certPem: issued.certPem });
      }
      await prisma.node.createMany({ data: nodes });
      await prisma.nodeCredential.createMany({ data: creds });
    }
    return out;
  },

  /** Nodes created by an earlier process on the same database (for `connected` counts). */
  async knownNodes() {
    provisioned = (await prisma.node.findMany({ select: { id: true } })).map((n) => n.id);
    return provisioned.length;
  },

  /** Process readings; `gc` collects garbage first (twice, so finalizers' garbage goes too). */
  async stats({ collect = false, reset = false }: { collect?: boolean; reset?: boolean }) {
    if (collect) {
      if (gc === undefined) throw new Error("start the server child with --expose-gc");
      gc();
      await new Promise((r) => setTimeout(r, 200));
      gc();
      await new Promise((r) => setTimeout(r, 200));
    }
    const mem = process.memoryUsage();
    const now = performance.eventLoopUtilization();
    const window = performance.eventLoopUtilization(now, elu);
    const delay = {
      p50: loopDelay.percentile(50) / 1e6,
      p99: loopDelay.percentile(99) / 1e6,
      max: loopDelay.max / 1e6,
    };
    if (reset) {
      elu = now;
      loopDelay.reset();
    }
    let connected = 0;
    for (const id of provisioned) if (server.sessionsConnected(id)) connected++;
    return { at: Date.now(), cpu: process.cpuUsage(), mem, status: procStatus(), elu: window.utilization, loopDelayMs: delay, connected };
  },

  /** What the database holds about liveness: persisted heartbeat times and stored liveness. */
  async liveness({ since }: { since: number }) {
    const rows = await prisma.$queryRaw<
      { total: bigint; fresh: bigint; online: bigint; oldest: Date | null; newest: Date | null }[]
    >`SELECT count(*) AS total,
             count(*) FILTER (WHERE "lastHeartbeatAt" >= ${new Date(since)}) AS fresh,
             count(*) FILTER (WHERE liveness = 'online') AS online,
             min("lastHeartbeatAt") AS oldest,
             max("lastHeartbeatAt") AS newest
        FROM "Node"`;
    const r = rows[0]!;
    return {
      at: Date.now(),
      total: Number(r.total),
      fresh: Number(r.fresh),
      online: Number(r.online),
      oldest: r.oldest?.getTime() ?? null,
      newest: r.newest?.getTime() ?? null,
    };
  },

  /**
   * What the server's periodic loops and a session's opening cost on this database, timed one by
   * one on a side set of Deps that shares the real database: the same functions, with every
   * provisioned node "connected" (so the revoked-session sweep has sessions to look after) and a
   * heartbeat of every node waiting to be flushed. Run before agents connect; it leaves the nodes
   * pending and unheard-of again (their audit records of going online stay).
   */
  async loopCosts({ rounds = 5, opens = 200 }: { rounds?: number; opens?: number }) {
    const creds = await prisma.nodeCredential.findMany({ select: { serial: true, nodeId: true, expiresAt: true } });
    const { clock, log, sessions, heartbeats, liveness, engine, shutdown } = loopDeps(prisma, config, creds, 0);
    const reconciler = { prisma, clock, liveness, log };
    const time = async (fn: () => Promise<unknown>, n: number) => {
      const t = performance.now();
      for (let i = 0; i < n; i++) await fn();
      return (performance.now() - t) / n;
    };
    const recordAll = () => {
      const now = Date.now();
      for (const c of creds) heartbeats.record(c.nodeId, now);
    };
    const out: Record<string, number> = { nodes: creds.length };
    out.flushAllMs = await time(async () => {
      recordAll();
      await heartbeats.flush(server.db.direct);
    }, rounds);
    // The first round moves every node from its stored liveness to online (with an audit record
    // each, as when a fleet connects); later rounds find no node whose stored liveness is contradicted.
    const t0 = performance.now();
    out.livenessTransitions = await reconcileLiveness(reconciler);
    out.firstReconcileMs = performance.now() - t0;
    out.reconcileLivenessMs = await time(() => reconcileLiveness(reconciler), rounds);
    out.closeRevokedSessionsMs = await time(revokedSessionSweeper({ prisma, clock, sessions }), rounds);
    out.jobsSweepMs = await time(() => engine.sweep(), rounds);
    const sample = creds.slice(0, Math.min(opens, creds.length));
    let k = 0;
    const reads = new OpeningReads(server.db.direct);
    out.sessionOpenMs = await time(() => {
      const c = sample[k++ % sample.length]!;
      return reads.read({ nodeId: c.nodeId, serial: c.serial, certificateExpiresAt: c.expiresAt.getTime() }, new Date());
    }, sample.length);
    out.roundTripMs = await time(() => prisma.$queryRaw`SELECT 1`, sample.length);
    sessions.closeAll(new ConnectError("bench", Code.Canceled));
    shutdown.abort();
    // Back to a fleet never heard from, as provisioned.
    await prisma.$executeRaw`UPDATE "Node" SET liveness = 'pending', "lastHeartbeatAt" = NULL, "agentVersion" = NULL, "protocolVersion" = NULL`;
    return out;
  },

  /** The database floor: `n` Prisma round trips (SELECT 1) one after another; ms each. */
  async roundTrip({ n }: { n: number }) {
    const t0 = performance.now();
    for (let i = 0; i < n; i++) await prisma.$queryRaw`SELECT 1`;
    return (performance.now() - t0) / n;
  },

  heapSummary: () => heapSummary(),

  /** This process by second since `fromMs` (./timeline.ts). */
  seconds: ({ fromMs }: { fromMs: number }) => seconds.since(fromMs),
  stalls: ({ fromMs }: { fromMs: number }) => stalls.since(fromMs),

  allocStart: ({ intervalBytes }: { intervalBytes?: number }) => startAllocationProfile(intervalBytes),
  allocStop: ({ inclusive }: { inclusive?: string[] }) => stopAllocationProfile(inclusive),

  profileStart: ({ intervalUs }: { intervalUs?: number }) => startProfile(intervalUs),
  async profileStop({ inclusive }: { inclusive?: string[] }) {
    return summarizeProfile(await stopProfile(), inclusive);
  },

  async stop() {
    await server.stop();
    setTimeout(() => process.exit(0), 50);
    return true;
  },
});
emit("ready", { url: server.url });
