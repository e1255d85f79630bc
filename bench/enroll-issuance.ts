// Throughput of node certificate issuance (CSR checks + native signing), the CPU-bound part
// of enrollment. CSRs are prepared first so key generation is not measured.
// Usage: npx tsx bench/enroll-issuance.ts [count=200]
import { generateKeyPair, randomUUID } from "node:crypto";
import { mkdtempSync, rmSync } from "node:fs";
import { cpus, tmpdir } from "node:os";
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

  for (const csr of csrs.slice(0, WARMUP)) ca.issueNodeCertificate(csr, randomUUID(), { validityMs: 86_400_000 });

  const durations: number[] = [];
  const start = performance.now();
  for (const csr of csrs) {
    const t0 = performance.now();
    ca.issueNodeCertificate(csr, randomUUID(), { validityMs: 86_400_000 });
    durations.push(performance.now() - t0);
  }
  const totalMs = performance.now() - start;

  durations.sort((a, b) => a - b);
  const pct = (p: number) => durations[Math.min(durations.length - 1, Math.ceil((p / 100) * durations.length) - 1)]!;
  console.log(`cpu: ${cpus()[0]?.model ?? "unknown"} x${cpus().length}, node ${process.version}`);
  console.log(
    `certificates issued: ${count}, per second: ${((count / totalMs) * 1000).toFixed(0)}, ` +
      `p50 ms: ${pct(50).toFixed(2)}, p99 ms: ${pct(99).toFixed(2)}`,
  );
} finally {
  rmSync(dir, { recursive: true, force: true });
}
