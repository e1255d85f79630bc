// Start-up time of the real control-plane process on the embedded database: from spawn to the
// first GetServerInfo answer (port open) and to a SERVING health check (database ready), on a
// fresh data directory (cold) and on a restart of it (warm).
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { spawnServer } from "../test/support/process.js";
import { postJson } from "../test/support/http.js";

async function measure(dir: string): Promise<{ infoMs: number; servingMs: number }> {
  const started = performance.now();
  const p = spawnServer({ MODELFORGE_DATA_DIR: join(dir, "data"), MODELFORGE_CERTS_DIR: join(dir, "certs") });
  const url = await p.listening;
  const ca = readFileSync(join(dir, "certs", "ca.crt"), "utf8");
  await postJson(`${url}/modelforge.agent.v1.AgentService/GetServerInfo`, ca, {});
  const infoMs = performance.now() - started;
  for (;;) {
    const res = await postJson(`${url}/grpc.health.v1.Health/Check`, ca, { service: "" });
    if ((res.body as { status?: string }).status === "SERVING") break;
    await new Promise((r) => setTimeout(r, 10));
  }
  const servingMs = performance.now() - started;
  p.child.kill("SIGTERM");
  await p.exited;
  return { infoMs, servingMs };
}

const dir = mkdtempSync(join(tmpdir(), "mf-bench-startup-"));
try {
  const cold = await measure(dir);
  const warm = [];
  for (let i = 0; i < 3; i++) warm.push(await measure(dir));
  const fmt = (ms: number) => `${Math.round(ms)} ms`;
  console.log(`cold start (new data directory): GetServerInfo after ${fmt(cold.infoMs)}, SERVING after ${fmt(cold.servingMs)}`);
  for (const [i, w] of warm.entries()) {
    console.log(`warm start ${i + 1}: GetServerInfo after ${fmt(w.infoMs)}, SERVING after ${fmt(w.servingMs)}`);
  }
} finally {
  rmSync(dir, { recursive: true, force: true });
}
