// Bench-only: the control plane of bench/invoke.ts in its own process (startServer, configured
// from the MODELFORGE_* environment), with a bench hook over IPC that times durable job-like rows.
import { randomUUID } from "node:crypto";
import { loadConfig } from "../../server/config.js";
import { createLogger } from "../../server/observability/logger.js";
import { startServer } from "../../server/app.js";
import { emit, serve } from "./ipc.js";

const config = loadConfig(process.env);
const server = await startServer(config, createLogger(config.logLevel));
const prisma = server.db.prisma;

serve({
  info: () => ({ url: server.url, caPem: server.ca.certPem, fingerprint: server.ca.fingerprint, pid: process.pid }),
  /** What one durable row per invoke would cost: insert, then two updates (leased, completed), as a job does. */
  async durableRows({ ms, concurrency }: { ms: number; concurrency: number }) {
    const end = performance.now() + ms;
    let done = 0;
    await Promise.all(
      Array.from({ length: concurrency }, async () => {
        while (performance.now() < end) {
          const id = randomUUID();
          await prisma.auditEvent.create({ data: { id, actor: "bench", action: "bench.invoke", targetType: "job", targetId: id } });
          await prisma.auditEvent.update({ where: { id }, data: { details: { state: "leased" } } });
          await prisma.auditEvent.update({ where: { id }, data: { details: { state: "succeeded" } } });
          done++;
        }
      }),
    );
    await prisma.auditEvent.deleteMany({ where: { action: "bench.invoke" } });
    return { perSecond: (done * 1000) / ms };
  },
  async stop() {
    await server.stop();
    setTimeout(() => process.exit(0), 50);
    return true;
  },
});
emit("ready", { url: server.url });
