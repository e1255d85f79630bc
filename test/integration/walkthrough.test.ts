// The README's quick start and "Serve your first model", run as a new user runs them, so the README
// cannot rot: the quick start's first command (less its `npm ci`) starts the control plane, then
// every block fenced as ```sh walkthrough runs, in order, in one bash session: a real server
// (`npm start`), a real agent (`npm run agent`) serving the example model with llama.cpp, the real
// CLI and curl. It runs in a scratch checkout (symlinks to this checkout's files, with data/ and
// certs/ of its own), so the README's relative paths and $PWD work as written and nothing touches
// this checkout's data; only the port and MODELFORGE_SERVER are pointed elsewhere. Each block is
// announced before it runs, so a failure names its line in README.md.
import { spawn } from "node:child_process";
import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import { loadavg, tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { repoRoot } from "../support/process.js";
import { freePort } from "../support/ports.js";
import { fencedBlocks } from "../support/markdown.js";

const readme = readFileSync(join(repoRoot, "README.md"), "utf8");
const quickstart = fencedBlocks("README.md", readme, "quickstart");
const walkthrough = fencedBlocks("README.md", readme, "walkthrough");
const commands = (code: string) => code.split("\n").filter((l) => l.trim() !== "" && !l.trim().startsWith("#"));

describe("the README's quick start", () => {
  it("is two commands: install and start the control plane, then the test suite CI runs", () => {
    expect(quickstart).toHaveLength(1);
    const [start, test] = commands(quickstart[0]!.code);
    expect(commands(quickstart[0]!.code)).toHaveLength(2);
    expect(start).toMatch(/^npm ci && .*\bnpm start\b/);
    expect(test).toMatch(/^npm test\b/);
    const ci = readFileSync(join(repoRoot, ".ci/run"), "utf8");
    // The whole suite on the embedded database, and the database project again on PostgreSQL.
    expect(ci).toMatch(/MODELFORGE_TEST_DB=pglite npm test\n/);
    expect(ci).toMatch(/MODELFORGE_TEST_DB=postgres npm run test:database\n/);
    const scripts = (JSON.parse(readFileSync(join(repoRoot, "package.json"), "utf8")) as { scripts: Record<string, string> }).scripts;
    expect(scripts["test:database"]).toBe("vitest run --project database");
  });

  it("is followed by a walk-through with commands", () => {
    expect(walkthrough.length).toBeGreaterThanOrEqual(5);
    expect(walkthrough[0]!.line).toBeGreaterThan(quickstart[0]!.line);
  });
});

/** A checkout of this repository that shares its files but not its data: a directory of symlinks. */
function scratchCheckout(dir: string): string {
  const checkout = join(dir, "checkout");
  mkdirSync(checkout);
  const own = new Set(["data", "certs", ".git", "dist"]);
  for (const entry of readdirSync(repoRoot)) {
    if (!own.has(entry)) symlinkSync(join(repoRoot, entry), join(checkout, entry));
  }
  // dist/ is this checkout's: built once, here (see the script below).
  symlinkSync(join(repoRoot, "dist"), join(checkout, "dist"));
  return checkout;
}

/** Stops a process group, if it is still there. */
function killGroup(pgid: number | undefined): void {
  if (pgid === undefined || !Number.isInteger(pgid) || pgid <= 1) return;
  try {
    process.kill(-pgid, "SIGKILL");
  } catch {
    // already gone
  }
}

// The walk-through is on the embedded database; CI's second pass on PostgreSQL would only repeat it.
describe.skipIf(process.env.MODELFORGE_TEST_DB === "postgres")("the README's walk-through, run end to end", () => {
  let dir = "";
  let pgid: number | undefined;
  afterAll(() => {
    if (dir === "") return;
    // The agent first (it could still be starting a runtime), then the runtimes it recorded, which
    // are process groups of their own, then the control plane.
    const pidOf = (f: string) => (existsSync(join(dir, f)) ? Number(readFileSync(join(dir, f), "utf8").trim()) : undefined);
    killGroup(pidOf("logs/agent.pid"));
    const registry = join(dir, "checkout/data/agent/runtimes.json");
    if (existsSync(registry)) {
      for (const r of (JSON.parse(readFileSync(registry, "utf8")) as { runtimes: { pid: number }[] }).runtimes) killGroup(r.pid);
    }
    killGroup(pidOf("logs/server.pid"));
    killGroup(pgid);
    rmSync(dir, { recursive: true, force: true });
  });

  it("serves the example model and answers a chat completion", { timeout: 600_000 }, async () => {
    dir = mkdtempSync(join(tmpdir(), "mf-walkthrough-"));
    const checkout = scratchCheckout(dir);
    const logs = join(dir, "logs");
    mkdirSync(logs);
    const startCommand = commands(quickstart[0]!.code)[0]!.replace(/^npm ci && /, "");
    const port = await freePort();
    const agentPid = join(logs, "agent.pid");
    const script = [
      // Job control, as in an interactive shell: each background job gets a process group of its own.
      "set -euo pipefail",
      "set -m",
      // The scratch checkout's `npm start` finds dist/ fresh: its build step, run through a symlink,
      // does not know itself as the entry point and does nothing. So the build runs here, in this checkout.
      `echo "### build (at \${SECONDS} s)" >&2`,
      `(cd ${shellQuote(repoRoot)} && node scripts/build.mjs --if-stale)`,
      `echo "### ${quickstart[0]!.file}:${quickstart[0]!.line} quick start (at \${SECONDS} s)" >&2`,
      `bash -c ${shellQuote(startCommand)} >>"${logs}/server.log" 2>&1 </dev/null &`,
      `server_pid=$!; echo "$server_pid" >"${logs}/server.pid"`,
      // A first start copies the database template: a while on a busy machine.
      `serving() { curl -sf --cacert certs/ca.crt -H 'Content-Type: application/json' -d '{}' "https://127.0.0.1:${port}/grpc.health.v1.Health/Check" | grep -q '"SERVING"'; }`,
      "deadline=$((SECONDS + 180)); until serving 2>/dev/null; do kill -0 \"$server_pid\" && [ $SECONDS -lt $deadline ] || { echo 'the control plane never served' >&2; exit 1; }; sleep 0.5; done",
      // After each block, the agent's job (if the walk-through started it) is noted for afterAll.
      ...walkthrough.map(
        (b) =>
          `echo "### ${b.file}:${b.line} (at \${SECONDS} s)" >&2\n${b.code}\nif [ -n "\${agent_pid:-}" ]; then echo "$agent_pid" >"${agentPid}"; fi`,
      ),
      `kill -TERM -- "-$(cat "${logs}/server.pid")"`,
      `echo "### walk-through done (at \${SECONDS} s)" >&2`,
    ].join("\n");
    const scriptPath = join(logs, "walkthrough.sh");
    writeFileSync(scriptPath, script);
    const child = spawn("bash", [scriptPath], {
      cwd: checkout,
      detached: true,
      stdio: ["ignore", "pipe", "pipe"],
      env: {
        PATH: process.env.PATH ?? "",
        HOME: process.env.HOME ?? dir,
        MODELFORGE_PORT: String(port),
        MODELFORGE_SERVER: `https://127.0.0.1:${port}`,
      },
    });
    pgid = child.pid;
    let out = "";
    child.stdout.on("data", (c: Buffer) => (out += c.toString()));
    child.stderr.on("data", (c: Buffer) => (out += c.toString()));
    const code = await new Promise<number | null>((resolve) => child.on("exit", (c) => resolve(c)));
    const tail = (path: string) => (existsSync(path) ? readFileSync(path, "utf8").slice(-3000) : "(none)");
    const last = out.match(/### [^\n]+/g)?.at(-1);
    expect(
      code,
      `failed in ${last}:\n${out.slice(-6000)}\n--- server.log:\n${tail(join(logs, "server.log"))}\n--- agent.log:\n${tail(join(checkout, "data/agent/agent.log"))}`,
    ).toBe(0);
    expect(out).toContain("### walk-through done");
    // The answer of step 6: a real chat completion from llama.cpp, through the control plane's OpenAI API.
    expect(out).toMatch(/"object": "chat\.completion"/);
    expect(out).toMatch(/"model": "first-model"/);
    expect(out).toMatch(/"completion_tokens": [1-9]/);
    console.log(
      `walk-through: ${out.match(/### \S+ ?[^\n(]*\(at \d+ s\)/g)?.join(", ")}; load average ${loadavg()
        .map((l) => l.toFixed(1))
        .join(" ")}`,
    );
  });
});

function shellQuote(text: string): string {
  return `'${text.replaceAll("'", `'\\''`)}'`;
}
