// A reconnect storm that arrives while the control plane cannot accept (starting, or busy) must
// wait in the kernel's accept queue, not be dropped: Linux drops a SYN once the queue is full, and
// the agent's TCP stack retries it only after 1, 3, 7 s. The server is stopped (SIGSTOP) while
// more connections arrive than Node's default backlog (511) holds; every one must still connect.
import { connect, type Socket } from "node:net";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, expect, it } from "vitest";
import { spawnServer, type ServerProcess } from "../support/process.js";
import { createTestDatabase, type TestDatabase } from "../support/db.js";

const somaxconn = Number(readFileSync("/proc/sys/net/core/somaxconn", "utf8"));
// Well past Node's default and within what the kernel allows.
const storm = Math.min(1500, somaxconn - 16);

let server: ServerProcess;
let db: TestDatabase;
let dir: string;
beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), "mf-backlog-"));
  db = await createTestDatabase();
  server = spawnServer({
    MODELFORGE_DATA_DIR: db.dataDir,
    MODELFORGE_CERTS_DIR: join(dir, "certs"),
    MODELFORGE_OPERATOR_API_KEY: "backlog-test-admin-key-0123456789",
    ...(db.databaseUrl !== undefined ? { DATABASE_URL: db.databaseUrl } : {}),
  });
  await server.ready;
});
afterAll(async () => {
  server.child.kill("SIGCONT");
  server.child.kill("SIGTERM");
  await server.exited;
  await db.cleanup();
  rmSync(dir, { recursive: true, force: true });
});

it.skipIf(storm <= 600)(`holds ${storm} connections that arrive while the server accepts none`, async () => {
  const port = Number(new URL(await server.ready).port);
  server.child.kill("SIGSTOP");
  const sockets: Socket[] = [];
  try {
    let connected = 0;
    const all = new Promise<void>((resolve) => {
      for (let i = 0; i < storm; i++) {
        const s = connect({ host: "127.0.0.1", port });
        s.on("error", () => undefined);
        s.once("connect", () => {
          if (++connected === storm) resolve();
        });
        sockets.push(s);
      }
    });
    // The kernel completes queued handshakes at once; a dropped SYN would not be retried within
    // this deadline often enough to reach the count (and would find the queue still full).
    await Promise.race([all, new Promise((resolve) => setTimeout(resolve, 15_000))]);
    expect(connected).toBe(storm);
  } finally {
    for (const s of sockets) s.destroy();
    server.child.kill("SIGCONT");
  }
});
