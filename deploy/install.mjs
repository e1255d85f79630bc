#!/usr/bin/env node
// Installs the built control plane or node agent system-wide, from a checkout (after `npm ci`;
// it runs the build when dist/ is stale). Everything goes under --root (default /), so a package
// build or a test can lay it out in a scratch directory:
//
//   node deploy/install.mjs [--root DIR] [--prefix /usr/local] [--node PATH] [--with-llama | --gpu] [--allocator jemalloc|system] agent|server
//
// agent:  <prefix>/lib/modelforge-agent/ (the standalone bundle and its manifest; with --with-llama
//         llama-server/, the llama.cpp engine's runtime and its libraries; with --gpu the GPU agent,
//         dist/agent-gpu/, whole: llama-server/, the CUDA prebuilts and gpu-check.mjs), <prefix>/bin/modelforge-agent
// server: <prefix>/lib/modelforge/ (the server and CLI bundles, the database template, migrations, the
//         packages its manifest names and nothing else), <prefix>/bin/modelforge-server, <prefix>/bin/modelforge
// both:   /etc/systemd/system/modelforge-<part>.service, /usr/lib/sysusers.d/modelforge-<part>.conf,
//         /etc/modelforge/<part>.env (0640, never overwritten), /var/lib/modelforge/<part> (0700)
//
// With --root / it also creates the service user (systemd-sysusers), hands it the state
// directories and the env file's group, and reloads systemd. It never enables or starts a unit.
import { execFileSync } from "node:child_process";
import { chmodSync, chownSync, cpSync, existsSync, mkdirSync, readdirSync, readFileSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import { dirname, isAbsolute, join, relative } from "node:path";
import { fileURLToPath } from "node:url";
import { parseArgs } from "node:util";

const checkout = fileURLToPath(new URL("..", import.meta.url));
const here = (...p) => join(checkout, ...p);

const usage = `Usage: node deploy/install.mjs [--root DIR] [--prefix /usr/local] [--node PATH] [--with-llama | --gpu] [--allocator jemalloc|system] agent|server
`;

class UsageError extends Error {}

function options(argv) {
  const { values, positionals } = parseArgs({
    args: argv,
    allowPositionals: true,
    options: {
      root: { type: "string", default: "/" },
      prefix: { type: "string", default: "/usr/local" },
      node: { type: "string", default: process.execPath },
      "with-llama": { type: "boolean", default: false },
      // The GPU agent (scripts/build-gpu.mjs): llama.cpp with its CUDA builds.
      gpu: { type: "boolean", default: false },
      // The server's C allocator: jemalloc preloaded when the host has it (server/tuning.ts), or the system's.
      allocator: { type: "string", default: "jemalloc" },
      help: { type: "boolean", short: "h" },
    },
  });
  if (values.help) {
    process.stdout.write(usage);
    process.exit(0);
  }
  const part = positionals[0];
  if (positionals.length !== 1 || (part !== "agent" && part !== "server")) throw new UsageError("name one part: agent or server");
  for (const k of ["root", "prefix", "node"]) {
    if (!isAbsolute(values[k])) throw new UsageError(`--${k} must be an absolute path`);
  }
  if (values["with-llama"] && part !== "agent") throw new UsageError("--with-llama is for the agent");
  if (values.gpu && part !== "agent") throw new UsageError("--gpu is for the agent");
  if (values.gpu && values["with-llama"]) throw new UsageError("--gpu carries llama.cpp's CPU build already: drop --with-llama");
  if (values.allocator !== "jemalloc" && values.allocator !== "system") throw new UsageError("--allocator is jemalloc or system");
  const jemalloc = part === "server" && values.allocator === "jemalloc" ? findJemalloc() : undefined;
  return {
    part,
    root: values.root,
    prefix: values.prefix,
    node: values.node,
    withLlama: values["with-llama"],
    gpu: values.gpu,
    allocator: values.allocator,
    jemalloc,
  };
}

/** Lays files down under the root, with explicit modes (the umask does not decide them). */
class Layout {
  constructor(root) {
    this.root = root;
    this.laid = [];
  }
  at(path) {
    return join(this.root, path);
  }
  dir(path, mode = 0o755) {
    mkdirSync(this.at(path), { recursive: true, mode });
    chmodSync(this.at(path), mode);
  }
  file(path, content, mode) {
    this.dir(dirname(path));
    writeFileSync(this.at(path), content, { mode });
    chmodSync(this.at(path), mode);
    this.laid.push(path);
  }
  /** A configuration file is the operator's once it exists: never overwritten. */
  config(path, content, mode) {
    if (existsSync(this.at(path))) return false;
    this.file(path, content, mode);
    return true;
  }
  /** Replaces a directory tree wholesale (an upgrade leaves no file of the previous version behind). */
  tree(path, from) {
    rmSync(this.at(path), { recursive: true, force: true });
    this.dir(dirname(path));
    cpSync(from, this.at(path), { recursive: true, verbatimSymlinks: true });
    this.laid.push(`${path}/`);
  }
  link(path, target) {
    this.dir(dirname(path));
    rmSync(this.at(path), { force: true });
    symlinkSync(relative(dirname(path), target), this.at(path));
    this.laid.push(path);
  }
}

/** The unit with the install's paths and the server's allocator filled in. */
function unit(part, opts) {
  return readFileSync(here("deploy", `modelforge-${part}.service`), "utf8")
    .replaceAll("@NODE@", opts.node)
    .replaceAll("@LIBDIR@", join(opts.prefix, "lib"))
    .replaceAll("@ALLOCATOR@", allocatorLine(opts));
}

// Where distributions put jemalloc (server/tuning.ts serverAllocator): Debian's multiarch
// directory, then the RPM and plain layouts.
const multiarch = process.arch === "arm64" ? "aarch64-linux-gnu" : "x86_64-linux-gnu";
const jemallocPaths = [`/usr/lib/${multiarch}/libjemalloc.so.2`, "/usr/lib64/libjemalloc.so.2", "/usr/lib/libjemalloc.so.2"];

/** The host's jemalloc, or undefined: a missing preload only makes ld.so warn, so it is checked here. */
function findJemalloc() {
  return jemallocPaths.find((p) => existsSync(p));
}

function allocatorLine(opts) {
  if (opts.jemalloc !== undefined) return `Environment=LD_PRELOAD=${opts.jemalloc}`;
  return opts.allocator === "system"
    ? "# The system's allocator (installed with --allocator system)."
    : "# jemalloc was not installed when this unit was written (Debian: apt-get install libjemalloc2, then install again).";
}

/** What the install says about the server's allocator. */
function allocatorNote(opts) {
  if (opts.part !== "server") return [];
  if (opts.jemalloc !== undefined) return [`allocator: jemalloc (${opts.jemalloc})`];
  if (opts.allocator === "system") return ["allocator: the system's"];
  return [`allocator: the system's, since jemalloc is not installed (looked in ${jemallocPaths.join(", ")}); apt-get install libjemalloc2 and install again`];
}

/**
 * The packages a manifest names and everything they need, as the lockfile resolved them
 * (node_modules/<name>, or nested under the package that needs another version).
 */
function closure(dependencies) {
  const lock = JSON.parse(readFileSync(here("package-lock.json"), "utf8")).packages;
  const found = new Set();
  const visit = (name, from) => {
    for (let base = from; ; base = base.slice(0, Math.max(0, base.lastIndexOf("/node_modules/")))) {
      const path = `${base === "" ? "" : `${base}/`}node_modules/${name}`;
      if (lock[path] !== undefined) {
        if (found.has(path)) return;
        found.add(path);
        const entry = lock[path];
        const optionalPeers = entry.peerDependenciesMeta ?? {};
        const peers = Object.keys(entry.peerDependencies ?? {}).filter((p) => !optionalPeers[p]?.optional);
        for (const dep of [...Object.keys(entry.dependencies ?? {}), ...Object.keys(entry.optionalDependencies ?? {}), ...peers]) {
          visit(dep, path);
        }
        return;
      }
      if (base === "") return; // an optional dependency this platform did not install
    }
  };
  for (const name of Object.keys(dependencies)) visit(name, "");
  return [...found].filter((p) => existsSync(here(p))).sort();
}

function installAgent(layout, opts) {
  const lib = join(opts.prefix, "lib/modelforge-agent");
  const from = opts.gpu ? "dist/agent-gpu" : "dist/agent";
  const scripts = ["modelforge-agent.mjs", ...(opts.gpu ? ["gpu-check.mjs"] : [])];
  // A gpu-check.mjs of an earlier GPU install would outlive a CPU install.
  rmSync(layout.at(join(lib, "gpu-check.mjs")), { force: true });
  for (const name of [...scripts, "package.json"]) {
    layout.file(join(lib, name), readFileSync(here(from, name)), scripts.includes(name) ? 0o755 : 0o644);
  }
  // What an earlier install carried and this one may not: the engine, the CUDA packages.
  rmSync(layout.at(join(lib, "node_modules")), { recursive: true, force: true });
  rmSync(layout.at(join(lib, "llama-server")), { recursive: true, force: true });
  if (opts.gpu) layout.tree(join(lib, "node_modules"), here(from, "node_modules"));
  if (opts.gpu || opts.withLlama) layout.tree(join(lib, "llama-server"), here(from, "llama-server"));
  layout.link(join(opts.prefix, "bin/modelforge-agent"), join(lib, "modelforge-agent.mjs"));
  return { lib, stateDirs: ["/var/lib/modelforge/agent", "/var/lib/modelforge/artifacts"] };
}

function installServer(layout, opts) {
  const lib = join(opts.prefix, "lib/modelforge");
  const manifest = JSON.parse(readFileSync(here("dist/server/package.json"), "utf8"));
  layout.file(join(lib, "package.json"), `${JSON.stringify(manifest, null, 2)}\n`, 0o644);
  rmSync(layout.at(join(lib, "dist/server")), { recursive: true, force: true });
  for (const name of readdirSync(here("dist/server")).filter((n) => n.endsWith(".mjs"))) {
    layout.file(join(lib, "dist/server", name), readFileSync(here("dist/server", name)), name === "main.mjs" ? 0o755 : 0o644);
  }
  layout.file(join(lib, "dist/cli/main.mjs"), readFileSync(here("dist/cli/main.mjs")), 0o755);
  layout.tree(join(lib, "dist/server/pglite-template"), here("dist/server/pglite-template"));
  layout.tree(join(lib, "prisma/migrations"), here("prisma/migrations"));
  rmSync(layout.at(join(lib, "node_modules")), { recursive: true, force: true });
  for (const path of closure(manifest.dependencies)) layout.tree(join(lib, path), here(path));
  layout.link(join(opts.prefix, "bin/modelforge-server"), join(lib, "dist/server/main.mjs"));
  layout.link(join(opts.prefix, "bin/modelforge"), join(lib, "dist/cli/main.mjs"));
  return { lib, stateDirs: ["/var/lib/modelforge/server"] };
}

function run(command, args) {
  try {
    execFileSync(command, args, { stdio: "inherit" });
    return true;
  } catch (err) {
    process.stderr.write(`install: ${command} ${args.join(" ")} failed: ${err.message}\n`);
    return false;
  }
}

function main(argv) {
  const opts = options(argv);
  // --gpu fetches the CUDA packages from the registry only if dist/.cache lacks them (scripts/build-gpu.mjs).
  // llama-server is compiled only for an agent that carries it (the build machine's compiler).
  const engine = opts.part === "agent" && (opts.gpu || opts.withLlama) ? [] : ["--no-engine"];
  const build = [...(opts.part === "agent" ? ["--bundles", ...(opts.gpu ? ["--gpu"] : [])] : []), ...engine];
  execFileSync(process.execPath, [here("scripts/build.mjs"), "--if-stale", ...build], {
    stdio: "inherit",
  });
  const layout = new Layout(opts.root);
  const { part } = opts;
  const installed = part === "agent" ? installAgent(layout, opts) : installServer(layout, opts);
  const user = part === "agent" ? "modelforge-agent" : "modelforge";

  layout.file(`/etc/systemd/system/modelforge-${part}.service`, unit(part, opts), 0o644);
  layout.file(`/usr/lib/sysusers.d/modelforge-${part}.conf`, readFileSync(here("deploy", `modelforge-${part}.sysusers`)), 0o644);
  layout.dir("/etc/modelforge", 0o755);
  const envPath = `/etc/modelforge/${part}.env`;
  const newEnv = layout.config(envPath, readFileSync(here("deploy", `${part}.env`)), 0o640);
  layout.dir("/var/lib/modelforge", 0o755);
  for (const dir of installed.stateDirs) layout.dir(dir, 0o700);

  if (opts.root === "/") {
    // The live system: the service user owns its state; it may read (not write) its configuration.
    if (run("systemd-sysusers", [`/usr/lib/sysusers.d/modelforge-${part}.conf`])) {
      const uid = Number(execFileSync("id", ["-u", user], { encoding: "utf8" }));
      const gid = Number(execFileSync("id", ["-g", user], { encoding: "utf8" }));
      for (const dir of installed.stateDirs) chownSync(dir, uid, gid);
      chownSync(envPath, 0, gid);
    }
    if (existsSync("/run/systemd/system")) run("systemctl", ["daemon-reload"]);
  }
  process.stdout.write(
    [
      `installed the ${part} into ${opts.root} (${installed.lib})`,
      ...layout.laid.map((p) => `  ${p}`),
      ...allocatorNote(opts),
      newEnv ? `configure ${envPath}, then: systemctl enable --now modelforge-${part}` : `kept the existing ${envPath}`,
      "",
    ].join("\n"),
  );
}

try {
  main(process.argv.slice(2));
} catch (err) {
  process.stderr.write(`install: ${err.message}\n${err instanceof UsageError ? usage : ""}`);
  process.exit(err instanceof UsageError ? 2 : 1);
}
