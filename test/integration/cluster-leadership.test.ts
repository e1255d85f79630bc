// One reconciler at a time: two control-plane processes on one PostgreSQL database (always
// PostgreSQL: replicas need it); exactly one leads the reconcilers; when that one is killed
// (SIGKILL: no goodbye, PostgreSQL notices the connection gone) the other takes over within
// seconds.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { spawnServer, type ServerProcess } from "../support/process.js";
import { createTestDatabase, type TestDatabase } from "../support/db.js";
import { waitFor } from "../support/wait.js";

let db: TestDatabase;
let dir: string;
const servers: ServerProcess[] = [];

const leading = (s: ServerProcess) => s.stdout().includes('"msg":"leading the reconcilers"');

beforeAll(async () => {
  db = await createTestDatabase("postgres");
  dir = mkdtempSync(join(tmpdir(), "mf-leader-"));
  for (const name of ["a", "b"]) {
    const s = spawnServer({
      DATABASE_URL: db.databaseUrl!,
      MODELFORGE_DATA_DIR: join(dir, name),
      MODELFORGE_CERTS_DIR: join(dir, "certs"),
      MODELFORGE_RECONCILE_INTERVAL: "200ms",
    });
    servers.push(s);
    await s.ready; // one after the other: the second reuses the CA the first made
  }
}, 120_000);

afterAll(async () => {
  for (const s of servers) s.child.kill("SIGKILL");
  await Promise.all(servers.map((s) => s.exited));
  await db?.cleanup();
  rmSync(dir, { recursive: true, force: true });
});

describe("reconciler leadership", () => {
  it("is held by one replica and taken over when that one is killed", async () => {
    const leader = await waitFor(() => servers.find(leading), { what: "a leader" });
    const other = servers.find((s) => s !== leader)!;
    expect(leading(other)).toBe(false);

    const killedAt = performance.now();
    leader.child.kill("SIGKILL");
    await leader.exited;
    await waitFor(() => leading(other), { what: "the other replica taking over", timeout: 15_000 });
    const tookS = (performance.now() - killedAt) / 1000;
    expect(tookS).toBeLessThan(10);
  }, 60_000);
});
