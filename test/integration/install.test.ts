// deploy/install.mjs into a scratch root: the agent and the control plane land where the units
// expect them, with the right modes; configuration is never overwritten; the agent install holds
// no Prisma or PGlite; the installed server starts from its own directory; and the units parse
// (`systemd-analyze verify`, where systemd-analyze exists) with a low exposure score.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { execFile, execFileSync } from "node:child_process";
import {
  existsSync,
  lstatSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  readlinkSync,
  realpathSync,
  rmSync,
  statSync,
  symlinkSync,
  writeFileSync,
} from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { promisify } from "node:util";
import { repoRoot, spawnServer } from "../support/process.js";
import { serverAllocator } from "../../server/tuning.js";

const run = promisify(execFile);
const root = mkdtempSync(join(tmpdir(), "mf-install-root-"));
const at = (p: string) => join(root, p);
const mode = (p: string) => statSync(at(p)).mode & 0o777;
const install = (...args: string[]) =>
  run(process.execPath, [join(repoRoot, "deploy/install.mjs"), "--root", root, ...args], { cwd: repoRoot });

function systemdAnalyze(): string | undefined {
  try {
    execFileSync("systemd-analyze", ["--version"], { stdio: "ignore" });
    return undefined;
  } catch (err) {
    return (err as Error).message;
  }
}
const noSystemdAnalyze = systemdAnalyze();

beforeAll(async () => {
  await install("--with-llama", "agent");
  await install("server");
}, 240_000);

afterAll(() => rmSync(root, { recursive: true, force: true }));

describe("install agent", () => {
  it("lays down the bundle, its command, unit, user, configuration and private state directories", () => {
    const lib = "usr/local/lib/modelforge-agent";
    expect(mode(`${lib}/modelforge-agent.mjs`)).toBe(0o755);
    expect(mode(`${lib}/llama-server/llama-server`)).toBe(0o755);
    expect(lstatSync(at("usr/local/bin/modelforge-agent")).isSymbolicLink()).toBe(true);
    expect(realpathSync(at("usr/local/bin/modelforge-agent"))).toBe(realpathSync(at(`${lib}/modelforge-agent.mjs`)));
    expect(mode("etc/systemd/system/modelforge-agent.service")).toBe(0o644);
    const unit = readFileSync(at("etc/systemd/system/modelforge-agent.service"), "utf8");
    // The installed agent prepares each start (and rolls a failed self-update back); the agent
    // update/current links to runs; a self-update's exit 75 is a failure Restart= restarts.
    expect(unit).toContain(`ExecStartPre=${process.execPath} /usr/local/lib/modelforge-agent/modelforge-agent.mjs update-prepare`);
    expect(unit).toContain(`ExecStart=${process.execPath} /var/lib/modelforge/agent/update/current/modelforge-agent.mjs run`);
    expect(unit).toMatch(/^Restart=on-failure$/m);
    expect(unit).not.toMatch(/^RestartPreventExitStatus=.*\b75\b/m);
    expect(readFileSync(at("usr/lib/sysusers.d/modelforge-agent.conf"), "utf8")).toMatch(/^u modelforge-agent /m);
    expect(mode("etc/modelforge/agent.env")).toBe(0o640);
    expect(readFileSync(at("etc/modelforge/agent.env"), "utf8")).toContain("MODELFORGE_AGENT_STATE=/var/lib/modelforge/agent/state.json");
    expect(mode("var/lib/modelforge/agent")).toBe(0o700);
    expect(mode("var/lib/modelforge/artifacts")).toBe(0o700);
  });

  it("prepares each start from the installed agent: links it as current, and rolls a failed self-update back", async () => {
    const lib = realpathSync(at("usr/local/lib/modelforge-agent"));
    const state = mkdtempSync(join(tmpdir(), "mf-install-state-"));
    const prepare = () =>
      run(process.execPath, [join(lib, "modelforge-agent.mjs"), "update-prepare", "--state", join(state, "state.json")], {
        env: { PATH: process.env.PATH ?? "" },
      });
    await prepare();
    const current = join(state, "update/current");
    expect(readlinkSync(current)).toBe(lib);
    // What an update leaves: current at a release that exits at start, a pending update naming
    // the installed agent as previous, out of starts. The next start (ExecStartPre) restores it.
    const release = join(state, "update/releases/9.9.9-bad");
    mkdirSync(release, { recursive: true });
    rmSync(current);
    symlinkSync(release, current);
    const pending = { rolloutId: "r1", version: "9.9.9", previous: lib, attempts: 3, deadlineAt: Date.now() + 60_000 };
    writeFileSync(join(state, "update/pending.json"), JSON.stringify(pending));
    const { stderr } = await prepare();
    expect(stderr).toContain("rolled back: 9.9.9 exited 3 times before a healthy session");
    expect(readlinkSync(current)).toBe(lib);
    expect(JSON.parse(readFileSync(join(state, "update/report.json"), "utf8"))).toMatchObject({ version: "9.9.9", succeeded: false });
    rmSync(state, { recursive: true, force: true });
  });

  it("carries llama-server and its ggml libraries, and no package at all: no Prisma, no PGlite, no node_modules", () => {
    const lib = at("usr/local/lib/modelforge-agent");
    expect(existsSync(join(lib, "node_modules"))).toBe(false);
    const engine = readdirSync(join(lib, "llama-server"));
    expect(engine).toEqual(expect.arrayContaining(["llama-server", "libggml.v0.4.0.so", "libggml-base.so", "libggml-cpu-x64.so"]));
    expect(engine.every((f) => f === "llama-server" || f === "build.json" || /^libggml.*\.so$/.test(f))).toBe(true);
    const manifest = JSON.parse(readFileSync(join(lib, "package.json"), "utf8"));
    expect(manifest.dependencies).toBeUndefined();
    expect(manifest.optionalDependencies).toBeUndefined();
  });

  it("runs from PATH and reads its configuration file", async () => {
    const { stdout } = await run(at("usr/local/bin/modelforge-agent"), ["--help"]);
    expect(stdout).toMatch(/^Usage: agent /);
    const state = join(root, "no-such-state.json");
    const config = join(root, "probe.env");
    writeFileSync(config, `MODELFORGE_AGENT_STATE=${state}\n`);
    const status = await run(at("usr/local/bin/modelforge-agent"), ["status", "--config", config]).catch((e: { stdout: string }) => e);
    expect(status.stdout).toContain(`not enrolled (no state at ${state})`);
  });

  it("keeps an operator's configuration on a reinstall", async () => {
    writeFileSync(at("etc/modelforge/agent.env"), "MODELFORGE_AGENT_LOG_LEVEL=debug\n");
    const { stdout } = await install("agent");
    expect(stdout).toContain("kept the existing /etc/modelforge/agent.env");
    expect(readFileSync(at("etc/modelforge/agent.env"), "utf8")).toBe("MODELFORGE_AGENT_LOG_LEVEL=debug\n");
    // Without --with-llama the engine is gone, not left over from before.
    expect(existsSync(at("usr/local/lib/modelforge-agent/llama-server"))).toBe(false);
  }, 60_000);
});

describe("install server", () => {
  it("lays down the bundles, template, migrations and exactly the manifest's packages", () => {
    const lib = "usr/local/lib/modelforge";
    expect(mode(`${lib}/dist/server/main.mjs`)).toBe(0o755);
    expect(existsSync(at(`${lib}/dist/server/pglite-template/PG_VERSION`))).toBe(true);
    expect(readdirSync(at(`${lib}/prisma/migrations`)).length).toBeGreaterThan(0);
    const manifest = JSON.parse(readFileSync(at(`${lib}/package.json`), "utf8"));
    expect(Object.keys(manifest.dependencies)).toContain("@electric-sql/pglite");
    // The bundle inlines Connect, protobuf-es, node-forge and pino; the agent's engine is not here.
    for (const absent of ["@connectrpc", "@bufbuild", "node-forge", "node-llama-cpp", "tsx", "vitest", "prisma"]) {
      expect(existsSync(at(`${lib}/node_modules/${absent}`)), absent).toBe(false);
    }
    expect(realpathSync(at("usr/local/bin/modelforge-server"))).toBe(realpathSync(at(`${lib}/dist/server/main.mjs`)));
    expect(mode("etc/modelforge/server.env")).toBe(0o640);
    expect(mode("var/lib/modelforge/server")).toBe(0o700);
    const unit = readFileSync(at("etc/systemd/system/modelforge-server.service"), "utf8");
    expect(unit).toContain(`ExecStart=${process.execPath} --max-semi-space-size=32 /usr/local/lib/modelforge/dist/server/main.mjs`);
    // CI installs the library (.ci/run), so the unit preloads it.
    expect(unit).toMatch(new RegExp(`^Environment=LD_PRELOAD=/\\S+/${serverAllocator.library.replaceAll(".", "\\.")}$`, "m"));
    for (const line of ["NoNewPrivileges=yes", "ProtectSystem=strict", "ReadWritePaths=/var/lib/modelforge/server", "Restart=on-failure"]) {
      expect(unit).toContain(line);
    }
  });

  it("leaves nothing group- or world-writable, and the template readable by the service user", () => {
    const writable: string[] = [];
    const walk = (path: string) => {
      const st = lstatSync(path);
      if (st.isSymbolicLink()) return;
      if (st.mode & 0o022) writable.push(`${path} ${(st.mode & 0o777).toString(8)}`);
      if (st.isDirectory()) for (const entry of readdirSync(path)) walk(join(path, entry));
    };
    walk(at("usr"));
    walk(at("etc"));
    expect(writable).toEqual([]);
    expect(mode("usr/local/lib/modelforge/dist/server/pglite-template")).toBe(0o755);
    expect(mode("usr/local/lib/modelforge/dist/server/pglite-template/PG_VERSION")).toBe(0o644);
  });

  it("starts from the installed directory alone, on the unit's allocator, and opens a database seeded from its template", async () => {
    const state = mkdtempSync(join(tmpdir(), "mf-installed-state-"));
    const unit = readFileSync(at("etc/systemd/system/modelforge-server.service"), "utf8");
    const preload = /^Environment=LD_PRELOAD=(\S+)$/m.exec(unit)?.[1];
    const server = spawnServer(
      { MODELFORGE_DATA_DIR: join(state, "data"), MODELFORGE_CERTS_DIR: join(state, "certs"), LD_PRELOAD: preload ?? "" },
      [at("usr/local/bin/modelforge-server")],
    );
    try {
      await server.ready;
      // The library the unit names really loads: the server reads its own memory map.
      expect(server.stdout()).toMatch(new RegExp(`"allocator":"${serverAllocator.name}"[^\\n]*"msg":"control plane serving"`));
      expect(server.stdout()).toContain(at("usr/local/lib/modelforge/dist/server/pglite-template"));
      // The seeded copy is private again.
      expect(statSync(join(state, "data/pglite")).mode & 0o777).toBe(0o700);
    } finally {
      server.child.kill("SIGTERM");
      await server.exited;
      rmSync(state, { recursive: true, force: true });
    }
  }, 90_000);
});

describe("install server --allocator", () => {
  it("refuses an allocator it does not know", async () => {
    const refused = await install("--allocator", "tcmalloc", "server").catch((e: { code: number; stderr: string }) => e);
    expect(refused).toMatchObject({ code: 2 });
    expect((refused as { stderr: string }).stderr).toContain("--allocator is jemalloc or system");
  });

  it("writes no preload with --allocator system, and says so", async () => {
    const { stdout } = await install("--allocator", "system", "server");
    expect(stdout).toContain("allocator: the system's");
    const unit = readFileSync(at("etc/systemd/system/modelforge-server.service"), "utf8");
    expect(unit).not.toContain("LD_PRELOAD");
    expect(unit).toContain("# The system's allocator (installed with --allocator system).");
    // Back to the default for the unit checks below.
    expect((await install("server")).stdout).toMatch(/^allocator: jemalloc \(\/\S+\)$/m);
  }, 120_000);
});

describe.skipIf(noSystemdAnalyze !== undefined)(
  `the units${noSystemdAnalyze ? ` (skipped: systemd-analyze is not available: ${noSystemdAnalyze})` : ""}`,
  () => {
    for (const part of ["agent", "server"]) {
      it(`modelforge-${part}.service parses cleanly and is hardened`, async () => {
        const unit = at(`etc/systemd/system/modelforge-${part}.service`);
        // verify exits 0 on unknown keys and bad values too; what it says on stderr is the finding.
        const verified = await run("systemd-analyze", ["verify", unit]);
        expect(verified.stderr).toBe("");
        const { stdout } = await run("systemd-analyze", ["security", "--offline=true", unit]);
        const exposure = Number(/Overall exposure level for \S+: ([\d.]+)/.exec(stdout)?.[1]);
        expect(exposure).toBeLessThanOrEqual(2.5);
      });
    }
  },
);
