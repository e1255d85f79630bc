// Start-up and shutdown of the real process: one clear line for a failed start, never a stack
// dump; SIGTERM drains and exits cleanly.
import { afterAll, describe, expect, it } from "vitest";
import { mkdtempSync, rmSync, mkdirSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { spawnServer } from "../support/process.js";
import { postJson } from "../support/http.js";
import { readFileSync } from "node:fs";

const dirs: string[] = [];
const tempDir = () => {
  const d = mkdtempSync(join(tmpdir(), "mf-startup-"));
  dirs.push(d);
  return d;
};
afterAll(() => {
  for (const d of dirs) rmSync(d, { recursive: true, force: true });
});

function expectOneLine(stderr: string, pattern: RegExp) {
  const lines = stderr.trim().split("\n");
  expect(lines).toHaveLength(1);
  expect(lines[0]).toMatch(pattern);
  expect(stderr).not.toMatch(/\n\s+at /);
}

describe("server process", () => {
  it("ends with one clear line when DATABASE_URL is unreachable, without leaking its password", async () => {
    const dir = tempDir();
    const p = spawnServer({
      MODELFORGE_DATA_DIR: join(dir, "data"),
      MODELFORGE_CERTS_DIR: join(dir, "certs"),
      DATABASE_URL: "postgresql://postgres:s3cret-pw@127.0.0.1:1/nowhere",
    });
    expect(await p.exited).toBe(1);
    expectOneLine(p.stderr(), /^modelforge: start-up failed: .*127\.0\.0\.1:1/);
    expect(p.stderr() + p.stdout()).not.toContain("s3cret-pw");
  });

  it("ends with one clear line when the embedded database directory is damaged", async () => {
    const dir = tempDir();
    mkdirSync(join(dir, "data", "pglite"), { recursive: true });
    writeFileSync(join(dir, "data", "pglite", "PG_VERSION"), "garbage\n");
    const p = spawnServer({ MODELFORGE_DATA_DIR: join(dir, "data"), MODELFORGE_CERTS_DIR: join(dir, "certs") });
    expect(await p.exited).toBe(1);
    expectOneLine(p.stderr(), /^modelforge: start-up failed: .*damaged/);
  });

  it("refuses a bad configuration value with exit code 2", async () => {
    const p = spawnServer({ MODELFORGE_STALE_AFTER: "soon" });
    expect(await p.exited).toBe(2);
    expectOneLine(p.stderr(), /^modelforge: configuration error: MODELFORGE_STALE_AFTER: expected a duration/);
  });

  it("answers GetServerInfo as soon as the port opens, then shuts down cleanly on SIGTERM once ready", async () => {
    const dir = tempDir();
    const p = spawnServer({ MODELFORGE_DATA_DIR: join(dir, "data"), MODELFORGE_CERTS_DIR: join(dir, "certs") });
    const url = await p.listening;
    const ca = readFileSync(join(dir, "certs", "ca.crt"), "utf8");
    const res = await postJson(`${url}/modelforge.agent.v1.AgentService/GetServerInfo`, ca, {});
    expect(res.status).toBe(200);
    await p.ready;
    p.child.kill("SIGTERM");
    expect(await p.exited).toBe(0);
    expect(p.stdout()).toContain('"msg":"stopped"');
  });

  it("stops cleanly when SIGTERM arrives while it is still starting", async () => {
    const dir = tempDir();
    const p = spawnServer({ MODELFORGE_DATA_DIR: join(dir, "data"), MODELFORGE_CERTS_DIR: join(dir, "certs") });
    await p.listening;
    p.child.kill("SIGTERM");
    expect(await p.exited).toBe(0);
  });
});
