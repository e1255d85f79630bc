// Enrollments per second through the real Enroll RPC (issue "fleet scale": target >= 300/s on this
// 2-core machine, on either database), RUNS runs with their spread, each beside its floor.
//
//   npx tsx bench/enroll.ts [--count=400] [--concurrency=32] [--addresses=16] [--keys=8] [--nat=500] [--profile=1]
//   (or COUNT, RUNS, CONCURRENCY, ADDRESSES, KEYS, NAT, PROFILE, LOG_LEVEL in the environment)
//
// The server is a real control plane (startServer with a loadConfig config, temp data and certs
// directories) in a child process (bench/support/server-child.ts), so its CPU is measured alone
// and the client's work does not share its event loop. Embedded PGlite by default; DATABASE_URL
// is respected (the bench then writes into that database: point it at a throwaway one), and
// BENCH_DB=postgres makes a throwaway database on MODELFORGE_TEST_POSTGRES_URL (default
// postgresql://postgres@127.0.0.1:5432/postgres) and drops it afterwards.
//
// Before timing: COUNT one-time tokens through the admin API, and KEYS RSA key pairs with one CSR
// each, built by the agent's own code (agent/pki/keys.ts). The CSRs are reused round-robin:
// generating a key and a forge-signed CSR costs ~30-80 ms, and the server ignores the CSR subject
// and does not require distinct keys, while it still parses and verifies every CSR it gets. Nothing
// is cached on disk. Then COUNT Enroll calls run CONCURRENCY at a time over ADDRESSES HTTP/2
// connections, each from its own source address on loopback (127.0.0.2, .3, ...): a fleet's nodes
// come from many addresses, and the server admits five enrollments at once per address.
// PROFILE=1 samples the server's CPU during the timed run and prints where it went.
//
// Then the NAT case: NAT enrollments (500) from one address, CONCURRENCY at a time, each retrying
// as the agent does (agent/enroll.ts: after the Retry-After it is given, jittered over its second
// half) when the server answers that the address has five in flight: the time until all are
// enrolled, the refusals on the way, and the rate against the many-address runs'.
import { generateKeyPair, X509Certificate } from "node:crypto";
import { mkdtempSync, openSync, rmSync } from "node:fs";
import { cpus, loadavg, tmpdir } from "node:os";
import { join } from "node:path";
import { promisify } from "node:util";
import { createClient, type Interceptor } from "@connectrpc/connect";
import { grpcTransport } from "../common/http2-sessions.js";
import { AdminService } from "../gen/proto/modelforge/admin/v1/admin_pb.js";
import { AgentService } from "../gen/proto/modelforge/agent/v1/agent_pb.js";
import { buildCsrPem } from "../agent/pki/keys.js";
import { whenAdmitted } from "../agent/enroll.js";
import { agentVersion } from "../agent/version.js";
import { createTestDatabase } from "../test/support/db.js";
import { forkTs, Rpc } from "./support/ipc.js";
import { benchServerEnv } from "./support/server-env.js";
import { printProfile, type ProfileSummary } from "./support/profile.js";
import { coresUsed, machineCores, machineCpu, ms, numParam, param, summarize } from "./support/stats.js";

const COUNT = numParam("COUNT", 400);
const CONCURRENCY = numParam("CONCURRENCY", 32);
const ADDRESSES = Math.min(250, Math.max(1, numParam("ADDRESSES", 16)));
const NAT = numParam("NAT", 500);
const KEYS = Math.max(1, numParam("KEYS", 8));
const WARMUP = numParam("WARMUP", 20);
const PROFILE = param("PROFILE", "0") === "1";
const RUNS = Math.max(1, numParam("RUNS", 3));
const TARGET = 300;
const profiledFunctions = [
  "issueNodeCertificate",
  "acceptedCsrPublicKey",
  "buildSignedCertificatePem",
  "sign",
  "enroll",
  "enrollNewNode",
  "hashEnrollmentSecret",
];
const adminKey = "bench-admin-key-0123456789abcdef";

type Stats = { at: number; cpu: NodeJS.CpuUsage; elu: number; loopDelayMs: { p99: number; max: number } };

const dir = mkdtempSync(join(tmpdir(), "mf-bench-enroll-"));
const throwaway = param("BENCH_DB", "pglite") === "postgres" ? await createTestDatabase("postgres") : undefined;
const databaseUrl = throwaway?.databaseUrl ?? process.env.DATABASE_URL;
const logPath = join(dir, "server.log");
const logFd = openSync(logPath, "a");
const child = forkTs(new URL("./support/server-child.ts", import.meta.url), {
  nodeFlags: ["--expose-gc"],
  stdio: ["ignore", logFd, logFd, "ipc"],
  env: benchServerEnv(dir, adminKey, { MODELFORGE_LOG_LEVEL: param("LOG_LEVEL", "info"), DATABASE_URL: databaseUrl ?? "" }),
});
const server = new Rpc(child, "server");

try {
  await server.waitFor("ready", 120_000);
  const info = await server.call<{ url: string; caPem: string; database: string }>("info");
  console.log(
    `server ${info.url}, database: ${info.database}, node ${process.version}, cpu ${cpus()[0]?.model} x${cpus().length}, load average ${loadavg()[0]!.toFixed(1)}`,
  );

  const auth: Interceptor = (next) => (req) => {
    req.header.set("x-modelforge-admin-token", adminKey);
    return next(req);
  };
  const admin = createClient(AdminService, grpcTransport({ baseUrl: info.url, nodeOptions: { ca: info.caPem }, interceptors: [auth] }));
  // The connection's source address (any of 127/8 on loopback); net.connect takes it, the TLS types omit it.
  const clientFrom = (localAddress: string) =>
    createClient(AgentService, grpcTransport({ baseUrl: info.url, nodeOptions: { ca: info.caPem, ...({ localAddress } as object) } }));
  const agents = Array.from({ length: ADDRESSES }, (_, i) => clientFrom(`127.0.0.${2 + i}`));

  let t0 = performance.now();
  const total = WARMUP + RUNS * COUNT + NAT;
  const tokens: string[] = new Array(total);
  await pool(total, 16, async (i) => {
    tokens[i] = (await admin.createEnrollmentToken({ nodeName: `bench-enroll-${i}` })).token;
  });
  console.log(
    `prepared ${total} enrollment tokens in ${((performance.now() - t0) / 1000).toFixed(1)} s (admin API, 16 at a time; not timed)`,
  );

  t0 = performance.now();
  const keyPems = await Promise.all(
    Array.from({ length: KEYS }, async () => {
      const { privateKey } = await promisify(generateKeyPair)("rsa", { modulusLength: 2048 });
      return privateKey.export({ type: "pkcs8", format: "pem" }).toString();
    }),
  );
  const csrs = keyPems.map((k, i) => buildCsrPem(k, `bench-key-${i}`));
  console.log(`prepared ${KEYS} key pairs and CSRs in ${((performance.now() - t0) / 1000).toFixed(1)} s (reused round-robin; not timed)`);

  const enrollOne = async (i: number) => {
    const res = await agents[i % ADDRESSES]!.enroll({
      token: tokens[i]!,
      csrPem: csrs[i % KEYS]!,
      nodeName: `bench-enroll-${i}`,
      agentVersion,
    });
    return res;
  };
  // Warm-up: JIT, connections, Prisma's query plans. Checked once, end to end.
  await pool(WARMUP, Math.min(CONCURRENCY, WARMUP), async (i) => {
    const res = await enrollOne(i);
    if (i === 0 && !new X509Certificate(res.certificatePem).verify(new X509Certificate(info.caPem).publicKey)) {
      throw new Error("issued certificate does not verify against the CA");
    }
  });

  /** One timed round of n operations, width at a time: rate, latency and what the server spent. */
  const round = async (n: number, op: (j: number) => Promise<unknown>, profile = false) => {
    if (profile) await server.call("profileStart", { intervalUs: 250 });
    const before = await server.call<Stats>("stats", { reset: true });
    const machineBefore = machineCpu();
    const clientBefore = process.cpuUsage();
    const latencies: number[] = [];
    const failures = new Map<string, number>();
    const t = performance.now();
    await pool(n, CONCURRENCY, async (j) => {
      const s = performance.now();
      try {
        await op(j);
        latencies.push(performance.now() - s);
      } catch (err) {
        const key = (err as Error).message.slice(0, 120);
        failures.set(key, (failures.get(key) ?? 0) + 1);
      }
    });
    const wallMs = performance.now() - t;
    const clientAfter = process.cpuUsage();
    const machineAfter = machineCpu();
    const after = await server.call<Stats>("stats", {});
    const summary = profile ? await server.call<ProfileSummary>("profileStop", { inclusive: profiledFunctions }) : undefined;
    const serverCpuMs = (after.cpu.user - before.cpu.user + after.cpu.system - before.cpu.system) / 1000;
    return {
      ok: latencies.length,
      failures,
      rate: (latencies.length / wallMs) * 1000,
      latency: summarize(latencies),
      serverCpuMsPerOp: serverCpuMs / Math.max(1, latencies.length),
      // The kernel's share: TLS records, loopback TCP to the database (its receive path runs in
      // the sender's system call) and the log's writes.
      serverSysMsPerOp: (after.cpu.system - before.cpu.system) / 1000 / Math.max(1, latencies.length),
      serverCores: coresUsed(before.cpu, after.cpu, after.at - before.at),
      elu: after.elu,
      loopDelayP99: after.loopDelayMs.p99,
      clientCores: coresUsed(clientBefore, clientAfter, wallMs),
      machineCores: machineCores(machineBefore, machineAfter, cpus().length),
      load: loadavg()[0]!,
      profile: summary,
    };
  };

  // Each run: COUNT enrollments, then the floor in the same conditions: COUNT GetServerInfo calls
  // (a unary RPC through the same connections, TLS, HTTP/2, Connect and interceptors, no database)
  // and Prisma round trips (SELECT 1) in the server.
  const runs: { enroll: Awaited<ReturnType<typeof round>>; floor: Awaited<ReturnType<typeof round>>; roundTripMs: number }[] = [];
  for (let r = 0; r < RUNS; r++) {
    const enroll = await round(COUNT, (j) => enrollOne(WARMUP + r * COUNT + j), PROFILE && r === 0);
    const floor = await round(COUNT, (j) => agents[j % ADDRESSES]!.getServerInfo({}));
    const roundTripMs = await server.call<number>("roundTrip", { n: 200 });
    runs.push({ enroll, floor, roundTripMs });
    for (const [m, n] of enroll.failures) console.log(`  failure x${n}: ${m}`);
    console.log(
      `run ${r + 1}: ${enroll.ok} enrollments (${[...enroll.failures.values()].reduce((a, b) => a + b, 0)} failed), ${enroll.rate.toFixed(0)}/s, ` +
        `p50 ${ms(enroll.latency.p50)} ms, p99 ${ms(enroll.latency.p99)} ms; server ${enroll.serverCpuMsPerOp.toFixed(2)} ms CPU each ` +
        `(${enroll.serverSysMsPerOp.toFixed(2)} in the kernel), ` +
        `${enroll.serverCores.toFixed(2)} cores, event loop ${(enroll.elu * 100).toFixed(0)}% busy (loop delay p99 ${ms(enroll.loopDelayP99)} ms); ` +
        `client ${enroll.clientCores.toFixed(2)} cores; machine ${enroll.machineCores.toFixed(2)} of ${cpus().length}; ` +
        `floor: GetServerInfo ${floor.rate.toFixed(0)}/s at ${floor.serverCpuMsPerOp.toFixed(2)} ms server CPU each ` +
        `(${floor.serverSysMsPerOp.toFixed(2)} kernel), ` +
        `Prisma round trip ${roundTripMs.toFixed(2)} ms; load average ${enroll.load.toFixed(1)}`,
    );
  }

  const spread = (values: number[], digits = 0) => {
    const sorted = [...values].sort((a, b) => a - b);
    const f = (v: number) => v.toFixed(digits);
    return `${f(sorted[Math.floor(sorted.length / 2)]!)} (${f(sorted[0]!)}-${f(sorted.at(-1)!)})`;
  };
  const median = (values: number[]) => [...values].sort((a, b) => a - b)[Math.floor(values.length / 2)]!;
  const rates = runs.map((x) => x.enroll.rate);
  console.log(
    `\nenrollments/s, median (range) of ${RUNS} runs of ${COUNT}: ${spread(rates)} (target >= ${TARGET}: ${median(rates) >= TARGET ? "met" : "NOT met"}); ` +
      `p99 ${spread(runs.map((x) => x.enroll.latency.p99))} ms at concurrency ${CONCURRENCY} over ${ADDRESSES} HTTP/2 connections from as many addresses`,
  );
  console.log(
    `server CPU per enrollment ${spread(
      runs.map((x) => x.enroll.serverCpuMsPerOp),
      2,
    )} ms; floor per GetServerInfo ${spread(
      runs.map((x) => x.floor.serverCpuMsPerOp),
      2,
    )} ms (${spread(runs.map((x) => x.floor.rate))}/s); ratio enrollments/s to GetServerInfo/s ${spread(
      runs.map((x) => x.enroll.rate / x.floor.rate),
      2,
    )}; Prisma round trip ${spread(
      runs.map((x) => x.roundTripMs),
      2,
    )} ms; load average ${spread(
      runs.map((x) => x.enroll.load),
      1,
    )}; ${info.database}`,
  );
  const profile = runs[0]?.enroll.profile;
  if (profile) {
    printProfile("server CPU profile during the first timed run", profile);
    const perEnroll = (name: string) => (profile.inclusive.find((r) => r.name === name)?.ms ?? 0) / runs[0]!.enroll.ok;
    console.log(`  per enrollment, inclusive: ${profile.inclusive.map((r) => `${r.name} ${perEnroll(r.name).toFixed(2)} ms`).join(", ")}`);
  }
  console.log(
    `RESULT ${JSON.stringify({ bench: "enroll", runs: RUNS, count: COUNT, perSecond: Math.round(median(rates)), perSecondRange: [Math.round(Math.min(...rates)), Math.round(Math.max(...rates))], p99Ms: median(runs.map((x) => x.enroll.latency.p99)), serverCpuMsPerEnroll: median(runs.map((x) => x.enroll.serverCpuMsPerOp)), floorServerCpuMsPerCall: median(runs.map((x) => x.floor.serverCpuMsPerOp)), concurrency: CONCURRENCY, addresses: ADDRESSES, database: info.database })}`,
  );
  if (NAT > 0) {
    const first = WARMUP + RUNS * COUNT;
    const nat = await natRound(clientFrom("127.0.0.254"), NAT, (i) => ({
      token: tokens[first + i]!,
      csrPem: csrs[i % KEYS]!,
      nodeName: `bench-nat-${i}`,
      agentVersion,
    }));
    console.log(
      `NAT: ${nat.enrolled} of ${NAT} enrolled from one address, ${CONCURRENCY} at a time, in ${(nat.wallMs / 1000).toFixed(1)} s ` +
        `(${nat.rate.toFixed(0)}/s, ${(nat.rate / median(rates)).toFixed(2)} of the many-address median); ${nat.refused} refusals ` +
        `("in flight"), a node waited at most ${(nat.longestMs / 1000).toFixed(1)} s; load average ${loadavg()[0]!.toFixed(1)}`,
    );
  }
  await server.call("stop", {}, 30_000).catch(() => undefined);
  await server.exit();
} catch (err) {
  console.error(err);
  console.error(`server log: ${logPath}`);
  child.kill("SIGKILL");
  process.exitCode = 1;
} finally {
  if (process.exitCode !== 1) rmSync(dir, { recursive: true, force: true });
  await throwaway?.cleanup().catch((err: unknown) => console.error(`dropping the throwaway database failed: ${(err as Error).message}`));
}
process.exit();

/** n enrollments from one client, CONCURRENCY at a time, each retried after the Retry-After it is given by the agent's own rule. */
async function natRound(
  client: { enroll(req: { token: string; csrPem: string; nodeName: string; agentVersion: string }): Promise<unknown> },
  n: number,
  request: (i: number) => { token: string; csrPem: string; nodeName: string; agentVersion: string },
) {
  let refused = 0;
  let enrolled = 0;
  let longestMs = 0;
  const t = performance.now();
  await pool(n, CONCURRENCY, async (i) => {
    const started = performance.now();
    await whenAdmitted(() => client.enroll(request(i)), { onBusy: () => refused++ });
    enrolled++;
    longestMs = Math.max(longestMs, performance.now() - started);
  });
  const wallMs = performance.now() - t;
  return { enrolled, refused, wallMs, longestMs, rate: (enrolled / wallMs) * 1000 };
}

/** Runs task(0..n-1) with at most `width` at a time. */
async function pool(n: number, width: number, task: (i: number) => Promise<void>): Promise<void> {
  let next = 0;
  const worker = async () => {
    for (let i = next++; i < n; i = next++) await task(i);
  };
  await Promise.all(Array.from({ length: Math.max(1, Math.min(width, n)) }, worker));
}
