// Every command in the runbooks (docs/runbooks/*.md, blocks fenced as ```sh runbook) runs here,
// in file order, in one bash session, as an operator would go through them: a real control plane
// (`npm start`), real agents (`npm run agent`), the real CLI, PostgreSQL on 127.0.0.1:5432 with
// databases of their own, everything else in a temp directory. The runbooks read their settings
// from variables with production defaults (MODELFORGE_HOME, MODELFORGE_PORT, ...); this test points
// them at the temp install. Each block is announced before it runs, so a failure names its file and line.
import { spawn } from "node:child_process";
import { mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { loadavg, tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import pg from "pg";
import { repoRoot } from "../support/process.js";
import { freePort } from "../support/ports.js";
import { fencedBlocks } from "../support/markdown.js";

const docs = join(repoRoot, "docs/runbooks");
const postgresUrl = process.env.MODELFORGE_TEST_POSTGRES_URL ?? "postgresql://postgres@127.0.0.1:5432/postgres";

const runbookBlocks = (file: string, text: string) => fencedBlocks(file, text, "runbook");

const files = readdirSync(docs)
  .filter((f) => /^\d\d-.*\.md$/.test(f))
  .sort();

describe("runbook extraction", () => {
  it("finds fenced blocks and their lines, and only those marked runbook", () => {
    const text = "# t\n```sh runbook\necho a\necho b\n```\n```sh\nnot me\n```\n```sh runbook\necho c\n```\n";
    expect(runbookBlocks("x.md", text)).toEqual([
      { file: "x.md", line: 3, code: "echo a\necho b" },
      { file: "x.md", line: 10, code: "echo c" },
    ]);
  });

  it("every runbook has commands", () => {
    expect(files.length).toBeGreaterThanOrEqual(7);
    for (const f of files) expect(runbookBlocks(f, readFileSync(join(docs, f), "utf8")).length, f).toBeGreaterThan(0);
  });
});

// The runbooks use both databases themselves (PGlite first, PostgreSQL in 08), so CI's second pass
// of the suite on PostgreSQL (MODELFORGE_TEST_DB=postgres) would only repeat the same few minutes.
describe.skipIf(process.env.MODELFORGE_TEST_DB === "postgres")("the runbooks, run end to end", () => {
  let dir = "";
  const suffix = `${process.pid}_${Date.now()}`;
  const databases = [`mf_runbook_${suffix}`, `mf_runbook_restored_${suffix}`];
  let pgid: number | undefined;
  afterAll(async () => {
    // What the runbooks left running: the script's own process group, and the servers and agents
    // they started, each in a process group of its own named by a *.pid file.
    const pidFiles = (d: string): string[] =>
      readdirSync(d, { withFileTypes: true }).flatMap((e) =>
        e.isDirectory() ? pidFiles(join(d, e.name)) : e.name.endsWith(".pid") ? [join(d, e.name)] : [],
      );
    if (dir === "") return;
    const groups = [...(pgid !== undefined ? [pgid] : []), ...pidFiles(dir).map((f) => Number(readFileSync(f, "utf8").trim()))];
    for (const group of groups.filter((g) => Number.isInteger(g) && g > 1)) {
      try {
        process.kill(-group, "SIGKILL");
      } catch {
        // already gone
      }
    }
    const admin = new pg.Client({ connectionString: postgresUrl });
    await admin.connect();
    for (const db of databases) await admin.query(`DROP DATABASE IF EXISTS "${db}" WITH (FORCE)`);
    await admin.end();
    rmSync(dir, { recursive: true, force: true });
  });

  it("every command works against a temporary install", { timeout: 600_000 }, async () => {
    const blocks = files.flatMap((f) => runbookBlocks(`docs/runbooks/${f}`, readFileSync(join(docs, f), "utf8")));
    const script = [
      "set -euo pipefail",
      ...blocks.map((b) => `echo "### ${b.file}:${b.line} (at \${SECONDS} s)" >&2\n${b.code}`),
      `echo "### all runbooks done (at \${SECONDS} s)" >&2`,
    ].join("\n");
    dir = mkdtempSync(join(tmpdir(), "mf-runbooks-"));
    const scriptPath = join(dir, "runbooks.sh");
    writeFileSync(scriptPath, script);
    const [port, port2, port3] = [await freePort(), await freePort(), await freePort()];
    const pgUrl = new URL(postgresUrl);
    const child = spawn("bash", [scriptPath], {
      cwd: repoRoot,
      detached: true,
      stdio: ["ignore", "pipe", "pipe"],
      env: {
        PATH: process.env.PATH ?? "",
        HOME: process.env.HOME ?? dir,
        MODELFORGE_HOME: join(dir, "home"),
        MODELFORGE_NODE_HOME: join(dir, "node"),
        MODELFORGE_PORT: String(port),
        MODELFORGE_REPLICA_PORTS: `${port2} ${port3}`,
        PGHOST: pgUrl.hostname,
        PGPORT: pgUrl.port || "5432",
        PGUSER: decodeURIComponent(pgUrl.username) || "postgres",
        ...(pgUrl.password !== "" ? { PGPASSWORD: decodeURIComponent(pgUrl.password) } : {}),
        MODELFORGE_DB: databases[0]!,
        MODELFORGE_RESTORED_DB: databases[1]!,
      },
    });
    pgid = child.pid;
    let out = "";
    child.stdout.on("data", (c: Buffer) => (out += c.toString()));
    child.stderr.on("data", (c: Buffer) => (out += c.toString()));
    const code = await new Promise<number | null>((resolve) => child.on("exit", (c) => resolve(c)));
    const last = out.match(/### [^\n]+/g)?.at(-1);
    const log = (name: string) => join(dir, name);
    const tail = (path: string) => {
      try {
        return readFileSync(path, "utf8").slice(-3000);
      } catch {
        return "(none)";
      }
    };
    expect(
      code,
      `failed in ${last}:\n${out.slice(-6000)}\n--- server.log:\n${tail(log("home/server.log"))}\n--- agent.log:\n${tail(log("node/agent.log"))}`,
    ).toBe(0);
    expect(out).toContain("### all runbooks done");
    // Where the time went, for whoever makes this faster: each file's start, and the load it ran under.
    console.log(
      `runbooks: ${out.match(/### \S+:\d+ \(at \d+ s\)/g)?.join(", ")}; load average ${loadavg()
        .map((l) => l.toFixed(1))
        .join(" ")}`,
    );
  });
});
