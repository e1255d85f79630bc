// Throughput of node certificate issuance (CSR checks + native signing), the CPU-bound part
// of enrollment, one at a time and CONCURRENCY (8) at a time, with what the event loop itself
// spends per certificate. CSRs are prepared first so key generation is not measured.
// Usage: npx tsx bench/enroll-issuance.ts [count=200]
import { generateKeyPair, randomUUID } from "node:crypto";
import { mkdtempSync, rmSync } from "node:fs";
import { cpus, loadavg, tmpdir } from "node:os";
import { performance } from "node:perf_hooks";
import { join } from "node:path";
import { promisify } from "node:util";
import { buildCsrPem } from "../agent/pki/keys.js";
import { loadOrCreateCa } from "../server/identity/pki/ca.js";

const count = Number(process.argv[2] ?? 200);
const WARMUP = 10;

const dir = mkdtempSync(join(tmpdir(), "modelforge-bench-pki-"));
try {
  const ca = await loadOrCreateCa(dir);
  const prepStart = performance.now();
  // Same key type and CSR builder as the agent, but keys generated in parallel on the libuv pool.
  const keys = await Promise.all(
    Array.from({ length: count }, () =>
      promisify(generateKeyPair)("rsa", { modulusLength: 2048 }).then(({ privateKey }) =>
        privateKey.export({ type: "pkcs8", format: "pem" }).toString(),
      ),
    ),
  );
  const csrs = keys.map((keyPem, i) => buildCsrPem(keyPem, `bench-${i}`));
  console.log(`prepared ${count} CSRs in ${((performance.now() - prepStart) / 1000).toFixed(1)} s (not timed)`);

  for (const csr of csrs.slice(0, WARMUP)) await ca.issueNodeCertificate(csr, randomUUID(), { validityMs: 86_400_000 });

  // One at a time: each issuance's latency, the signature on the thread pool included.
  const durations: number[] = [];
  let elu = performance.eventLoopUtilization();
  const start = performance.now();
  for (const csr of csrs) {
    const t0 = performance.now();
    await ca.issueNodeCertificate(csr, randomUUID(), { validityMs: 86_400_000 });
    durations.push(performance.now() - t0);
  }
  const totalMs = performance.now() - start;
  const sequentialLoopMs = performance.eventLoopUtilization(elu).active / count;

  // CONCURRENCY at a time, as in an enrollment storm: what the event loop itself spends per
  // certificate (the rest runs on the thread pool, on other cores).
  const concurrency = Number(process.env.CONCURRENCY ?? 8);
  elu = performance.eventLoopUtilization();
  const cpu = process.cpuUsage();
  const startConcurrent = performance.now();
  let next = 0;
  await Promise.all(
    Array.from({ length: concurrency }, async () => {
      for (let i = next++; i < count; i = next++) await ca.issueNodeCertificate(csrs[i]!, randomUUID(), { validityMs: 86_400_000 });
    }),
  );
  const concurrentMs = performance.now() - startConcurrent;
  const loopMs = performance.eventLoopUtilization(elu).active / count;
  const used = process.cpuUsage(cpu);
  const processCpuMs = (used.user + used.system) / 1000 / count;

  durations.sort((a, b) => a - b);
  const pct = (p: number) => durations[Math.min(durations.length - 1, Math.ceil((p / 100) * durations.length) - 1)]!;
  console.log(`cpu: ${cpus()[0]?.model ?? "unknown"} x${cpus().length}, node ${process.version}, load average ${loadavg()[0]!.toFixed(1)}`);
  console.log(
    `one at a time: ${count} certificates, ${((count / totalMs) * 1000).toFixed(0)}/s, p50 ${pct(50).toFixed(2)} ms, p99 ${pct(99).toFixed(2)} ms, ` +
      `event loop busy ${sequentialLoopMs.toFixed(2)} ms each`,
  );
  console.log(
    `${concurrency} at a time: ${((count / concurrentMs) * 1000).toFixed(0)}/s; event loop busy ${loopMs.toFixed(2)} ms per certificate, ` +
      `process CPU ${processCpuMs.toFixed(2)} ms per certificate (the signature on the thread pool included)`,
  );
} finally {
  rmSync(dir, { recursive: true, force: true });
}
