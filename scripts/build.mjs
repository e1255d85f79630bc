// Builds runnable JavaScript into dist/ with esbuild (no type checking: `npm run typecheck` does that).
//
//   dist/server/*.mjs                 the control plane: our code, Connect, protobuf-es, node-forge and
//                                     pino bundled; the database packages stay in node_modules (they
//                                     load WebAssembly and data files from beside their own modules)
//   dist/server/pglite-template/      an initialised, migrated embedded database a first start copies
//   dist/cli/main.mjs                 the operator CLI, standalone like the agent
//   dist/agent/modelforge-agent.mjs   the node agent, standalone: every dependency inlined, runs with
//                                     nothing but Node.js
//   dist/agent/llama-server/          the llama.cpp engine's runtime the agent supervises: llama.cpp's
//                                     llama-server and the prebuilt ggml libraries it loads
//                                     (scripts/build-llama-server.mjs compiles it once per checkout)
//   dist/agent-gpu/                   with --gpu: the agent for GPU nodes, dist/agent/ carrying
//                                     node-llama-cpp's CUDA prebuilts too (scripts/build-gpu.mjs)
//
// `node scripts/build.mjs --if-stale` builds only what a source newer than the last build makes
// stale, so `npm start` on a fresh clone builds once and then starts in plain node; `--bundles`
// leaves out the database template (for the CLI and the agent); `--no-engine` leaves out
// llama-server (the control plane alone needs no compiler); `--sea` adds the agent as a single
// executable (dist/agent/modelforge-agent); `--gpu` adds dist/agent-gpu/ and prints its size.
import { execFileSync, spawn } from "node:child_process";
import { chmodSync, copyFileSync, cpSync, existsSync, mkdirSync, readdirSync, readFileSync, renameSync, rmSync, statSync, utimesSync, writeFileSync } from "node:fs";
import { isBuiltin } from "node:module";
import { dirname, join, relative } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";
import { buildGpuAgent } from "./build-gpu.mjs";
import { ensureLlamaServer } from "./build-llama-server.mjs";

const root = fileURLToPath(new URL("..", import.meta.url));
const dist = join(root, "dist");
// Everything a build reads: a change to any of these makes the build stale.
const bundleInputs = [
  ...["server", "agent", "cli", "common", "gen", "package.json", "package-lock.json"],
  ...["scripts/build.mjs", "scripts/build-gpu.mjs", "scripts/gpu-check.ts", "scripts/gguf.ts", "scripts/llama-cuda-prebuilts.json"],
  ...["scripts/build-llama-server.mjs"],
];
// The embedded database template depends on the migrations, the PGlite version and the build.
const templateInputs = ["prisma/migrations", "package-lock.json", "scripts/build.mjs"];
const bundleStamp = join(dist, ".build-stamp");
const templateStamp = join(dist, ".template-stamp");
const templateDir = join(dist, "server/pglite-template");

/** The newest modification time (ms) among the inputs, walking directories. */
function newestInput(inputs) {
  let newest = 0;
  const visit = (path) => {
    const st = statSync(path, { throwIfNoEntry: false });
    if (st === undefined) return;
    if (st.isDirectory()) {
      for (const entry of readdirSync(path)) visit(join(path, entry));
    } else if (st.mtimeMs > newest) newest = st.mtimeMs;
  };
  for (const input of inputs) visit(join(root, input));
  return newest;
}

function isStale(stampPath, inputs) {
  const stamp = statSync(stampPath, { throwIfNoEntry: false });
  return stamp === undefined || newestInput(inputs) > stamp.mtimeMs;
}

/** Marks a step done as of `at`: a source saved while it ran makes the next check stale. */
function stamp(stampPath, at) {
  writeFileSync(stampPath, `${at.toISOString()}\n`);
  utimesSync(stampPath, at, at);
}

// ESM bundles of CommonJS packages call require() for Node built-ins; give them a real one.
const requireBanner = 'import { createRequire as __mfCreateRequire } from "node:module";\nconst require = __mfCreateRequire(import.meta.url);';

// The server's bundle sits in dist/server/, two levels below the repository root (an install keeps
// that shape), and reads files relative to its source modules (prisma/migrations, package.json, the
// generated Prisma client's directory). Each source module's import.meta.url is rewritten to where
// that module lies in the checkout, relative to the bundle, so those paths resolve as from source.
const sourceUrls = {
  name: "source-urls",
  setup(b) {
    b.onLoad({ filter: /\.ts$/ }, (args) => {
      if (args.path.includes("node_modules")) return undefined;
      const text = readFileSync(args.path, "utf8");
      if (!text.includes("import.meta.url")) return undefined;
      const fromRoot = relative(root, args.path).split("\\").join("/");
      const contents = text.replaceAll("import.meta.url", `new URL(${JSON.stringify(`../../${fromRoot}`)}, import.meta.url).href`);
      return { contents, loader: "ts" };
    });
  },
};

// The standalone agent has no package.json beside it: its version is read at build time.
const inlineVersion = {
  name: "inline-version",
  setup(b) {
    b.onLoad({ filter: /[\\/]agent[\\/]version\.ts$/ }, (args) => {
      const text = readFileSync(args.path, "utf8");
      const read = /JSON\.parse\(readFileSync\(new URL\("\.\.\/package\.json", import\.meta\.url\), "utf8"\)\)/;
      if (!read.test(text)) throw new Error(`${args.path}: the package.json read the build replaces has changed; update scripts/build.mjs`);
      const { version } = JSON.parse(readFileSync(join(root, "package.json"), "utf8"));
      const contents = text.replace(read, JSON.stringify({ version })).replace(/^import \{ readFileSync \} from "node:fs";$/m, "");
      return { contents, loader: "ts" };
    });
  },
};

const common = {
  bundle: true,
  platform: "node",
  format: "esm",
  target: "node20",
  write: false,
  logLevel: "warning",
  legalComments: "none",
  banner: { js: requireBanner },
};

function targets() {
  return [
    {
      entryPoints: { main: join(root, "server/main.ts") },
      outdir: join(dist, "server"),
      outExtension: { ".js": ".mjs" },
      // main.mjs stays small and starts copying the database template before it imports the rest.
      splitting: true,
      // Chunks sit beside main.mjs: sourceUrls resolves paths from two levels below the root.
      chunkNames: "[name]-[hash]",
      // Inlined: Connect, protobuf-es, node-forge, pino (resolving and loading hundreds of small
      // modules was a third of a warm start). Kept as imports: the database packages, which load
      // WebAssembly and data files from beside their own modules.
      external: ["@electric-sql/*", "@prisma/*", "pglite-prisma-adapter", "pg"],
      plugins: [sourceUrls],
      banner: { js: `#!/usr/bin/env node\n${requireBanner}` },
      // Relative to server/main.ts in the repository (see sourceUrls).
      define: { MODELFORGE_PGLITE_TEMPLATE: JSON.stringify("../dist/server/pglite-template") },
    },
    // The operator CLI, every dependency inlined like the agent's: installable with nothing else.
    { entryPoints: [join(root, "cli/main.ts")], outfile: join(dist, "cli/main.mjs"), banner: { js: `#!/usr/bin/env node\n${requireBanner}` } },
    {
      entryPoints: [join(root, "agent/main.ts")],
      outfile: join(dist, "agent/modelforge-agent.mjs"),
      plugins: [inlineVersion],
      // Executable as it is (installed as `modelforge-agent` on PATH).
      banner: { js: `#!/usr/bin/env node\n${requireBanner}` },
      // The supervisor starts this binary (beside the agent) for the llama.cpp engine.
      define: { MODELFORGE_LLAMA_SERVER: JSON.stringify("./llama-server/llama-server") },
    },
  ];
}

const executables = ["agent/modelforge-agent.mjs", "cli/main.mjs", "server/main.mjs"];

/** Builds every bundle; files are replaced atomically, so a concurrent start never reads half a file. */
async function buildBundles() {
  const { build } = await import("esbuild");
  const startedAt = new Date();
  const results = await Promise.all(targets().map((t) => build({ ...common, metafile: true, ...t })));
  mkdirSync(dist, { recursive: true });
  for (const file of results.flatMap((r) => r.outputFiles)) {
    mkdirSync(dirname(file.path), { recursive: true });
    const tmp = `${file.path}.${process.pid}.tmp`;
    writeFileSync(tmp, file.contents, { mode: executables.some((e) => file.path.endsWith(e)) ? 0o755 : 0o644 });
    renameSync(tmp, file.path);
  }
  // Chunks of earlier builds (their names carry a content hash) go.
  const written = new Set(results.flatMap((r) => r.outputFiles.map((f) => f.path)));
  for (const name of readdirSync(join(dist, "server")).filter((n) => n.endsWith(".mjs"))) {
    if (!written.has(join(dist, "server", name))) rmSync(join(dist, "server", name));
  }
  writeManifests(results[0].metafile);
  stamp(bundleStamp, startedAt);
}

/**
 * What each installed part needs besides Node.js, declared apart: the server's manifest names
 * exactly the packages its bundle leaves as imports (pinned from the lockfile); the agent's names
 * none (its engine, llama-server and its libraries, is carried beside it).
 * deploy/install.mjs installs each part from its own manifest.
 */
function writeManifests(serverMetafile) {
  const pkg = JSON.parse(readFileSync(join(root, "package.json"), "utf8"));
  const lock = JSON.parse(readFileSync(join(root, "package-lock.json"), "utf8")).packages;
  const pinned = (name) => {
    const version = lock[`node_modules/${name}`]?.version;
    if (version === undefined) throw new Error(`build: ${name} is imported by a bundle but not in package-lock.json`);
    return version;
  };
  const packageOf = (spec) => spec.split("/").slice(0, spec.startsWith("@") ? 2 : 1).join("/");
  const serverImports = Object.values(serverMetafile.outputs).flatMap((o) => o.imports.filter((i) => i.external).map((i) => i.path));
  const serverPackages = [...new Set(serverImports.filter((p) => !p.startsWith("node:") && !isBuiltin(p)).map(packageOf))].sort();
  const base = { version: pkg.version, private: true, type: "module", engines: pkg.engines };
  const manifests = {
    "server/package.json": { name: "modelforge-server", ...base, dependencies: Object.fromEntries(serverPackages.map((n) => [n, pinned(n)])) },
    "agent/package.json": {
      name: "modelforge-agent",
      ...base,
      bin: { "modelforge-agent": "modelforge-agent.mjs" },
    },
  };
  for (const [path, manifest] of Object.entries(manifests)) writeFileSync(join(dist, path), `${JSON.stringify(manifest, null, 2)}\n`);
}

/**
 * The embedded database as a first start leaves it (initdb done, migrations applied), made by
 * running the built server once on a scratch directory and stopping it cleanly. A first start
 * copies it instead of running initdb (server/db/pglite-seed.ts).
 */
async function buildTemplate() {
  const startedAt = new Date();
  const scratch = join(dist, `.template-${process.pid}`);
  rmSync(templateDir, { recursive: true, force: true }); // the server would seed from an old one
  try {
    const child = spawn(process.execPath, [join(dist, "server/main.mjs")], {
      env: {
        PATH: process.env.PATH ?? "",
        HOME: process.env.HOME ?? "/tmp",
        MODELFORGE_LISTEN_ADDRESS: "127.0.0.1",
        MODELFORGE_PORT: "0",
        MODELFORGE_DATA_DIR: join(scratch, "data"),
        MODELFORGE_CERTS_DIR: join(scratch, "certs"),
      },
      stdio: ["ignore", "pipe", "pipe"],
    });
    let out = "";
    child.stdout.on("data", (c) => (out += c));
    child.stderr.on("data", (c) => (out += c));
    const exited = new Promise((resolve) => child.on("exit", (code) => resolve(code)));
    await new Promise((resolve, reject) => {
      child.stdout.on("data", () => out.includes('"msg":"control plane ready"') && resolve());
      void exited.then((code) => reject(new Error(`build: the server exited (${code}) before its database was ready:\n${out}`)));
    });
    child.kill("SIGTERM");
    const code = await exited;
    if (code !== 0) throw new Error(`build: the server did not stop cleanly (${code}):\n${out}`);
    // PGlite leaves some files world-writable inside its 0700 directory. The template is read by the
    // service user from a root-owned install: readable by all, writable by none (an empty database
    // holds no secret; each seeded copy is made private again).
    const normalise = (path) => {
      const dir = statSync(path).isDirectory();
      chmodSync(path, dir ? 0o755 : 0o644);
      if (dir) for (const entry of readdirSync(path)) normalise(join(path, entry));
    };
    normalise(join(scratch, "data/pglite"));
    try {
      renameSync(join(scratch, "data/pglite"), templateDir);
    } catch (err) {
      // A concurrent build put its (identical) template there first.
      if (!existsSync(join(templateDir, "PG_VERSION"))) throw err;
    }
  } finally {
    rmSync(scratch, { recursive: true, force: true });
  }
  stamp(templateStamp, startedAt);
}

/**
 * `--sea`: the agent as one executable (Node's single executable application): the bundle, as
 * CommonJS since Node 20 runs only that, injected into a copy of this node binary. It starts
 * llama-server from the llama-server/ directory beside it, as the .mjs bundle does.
 */
async function buildSea() {
  const { build } = await import("esbuild");
  const work = join(dist, `.sea-${process.pid}`);
  const exe = join(dist, "agent/modelforge-agent");
  try {
    await build({
      ...common,
      write: true,
      format: "cjs",
      entryPoints: [join(root, "agent/main.ts")],
      outfile: join(work, "agent.cjs"),
      plugins: [inlineVersion],
      define: { "import.meta.url": "__mfSeaUrl", MODELFORGE_LLAMA_SERVER: JSON.stringify("./llama-server/llama-server") },
      banner: { js: 'const __mfSeaUrl = require("node:url").pathToFileURL(process.execPath).href;' },
    });
    writeFileSync(
      join(work, "sea.json"),
      JSON.stringify({ main: "agent.cjs", output: "agent.blob", disableExperimentalSEAWarning: true, useCodeCache: false }),
    );
    execFileSync(process.execPath, ["--experimental-sea-config", "sea.json"], { cwd: work, stdio: "ignore" });
    const { inject } = (await import("postject")).default;
    copyFileSync(process.execPath, join(work, "modelforge-agent"));
    await inject(join(work, "modelforge-agent"), "NODE_SEA_BLOB", readFileSync(join(work, "agent.blob")), {
      sentinelFuse: "NODE_SEA_FUSE_fce680ab2cc467b6e072b8b5df1996b2",
    });
    chmodSync(join(work, "modelforge-agent"), 0o755);
    renameSync(join(work, "modelforge-agent"), exe);
  } finally {
    rmSync(work, { recursive: true, force: true });
  }
}

/**
 * One build at a time per checkout (two test files or two `npm run forge` may start together): the
 * second waits, then finds nothing stale. A lock left by a dead process is taken over.
 */
async function withBuildLock(fn) {
  const lock = join(dist, ".build.lock");
  mkdirSync(dist, { recursive: true });
  for (;;) {
    try {
      writeFileSync(lock, `${process.pid}\n`, { flag: "wx" });
      break;
    } catch (err) {
      if (err.code !== "EEXIST") throw err;
      const pid = Number.parseInt(readFileSync(lock, "utf8"), 10);
      let alive = pid > 0;
      try {
        if (alive) process.kill(pid, 0);
      } catch (e) {
        alive = e.code === "EPERM";
      }
      if (!alive && pid > 0) rmSync(lock, { force: true });
      else await new Promise((r) => setTimeout(r, 200));
    }
  }
  try {
    return await fn();
  } finally {
    rmSync(lock, { force: true });
  }
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? "").href) {
  await withBuildLock(main);
}

async function main() {
  const ifStale = process.argv.includes("--if-stale");
  const started = performance.now();
  const steps = [];
  if (!ifStale || isStale(bundleStamp, bundleInputs)) {
    await buildBundles();
    steps.push("bundles");
  }
  // The CLI and the agent need no database template (`--bundles`).
  const template = !process.argv.includes("--bundles");
  if (template && (!ifStale || isStale(templateStamp, templateInputs) || !existsSync(join(templateDir, "PG_VERSION")))) {
    await buildTemplate();
    steps.push("embedded database template");
  }
  if (!process.argv.includes("--no-engine") && (await copyLlamaServer())) steps.push("llama-server");
  if (process.argv.includes("--sea") && (!ifStale || steps.includes("bundles") || !existsSync(join(dist, "agent/modelforge-agent")))) {
    await buildSea();
    steps.push("single-executable agent");
  }
  let gpuBytes;
  // The GPU agent is stale when older than the bundles it copies.
  const gpuBuilt = statSync(join(dist, "agent-gpu/package.json"), { throwIfNoEntry: false });
  if (process.argv.includes("--gpu") && (!ifStale || gpuBuilt === undefined || gpuBuilt.mtimeMs < statSync(bundleStamp).mtimeMs)) {
    gpuBytes = await buildGpuAgent({ root, dist, bundle: bundleGpuCheck });
    steps.push("GPU agent");
  }
  if (steps.length > 0) process.stderr.write(`build: ${steps.join(" and ")} written to dist/ in ${Math.round(performance.now() - started)} ms\n`);
  if (gpuBytes !== undefined) process.stderr.write(`build: the GPU agent dist/agent-gpu/ is ${Math.round(gpuBytes / 1e6)} MB\n`);
}

/**
 * dist/agent/llama-server/: llama-server (compiled first when missing or stale) and copies of the
 * prebuilt libraries it loads, so the directory installs anywhere. False when it was current.
 */
async function copyLlamaServer() {
  const built = await ensureLlamaServer(root);
  const to = join(dist, "agent/llama-server");
  const current = (dir) => readFileSync(join(dir, "build.json"), { encoding: "utf8", flag: "r" });
  if (existsSync(join(to, "build.json")) && current(to) === current(built)) return false;
  const staging = `${to}.${process.pid}.tmp`;
  rmSync(staging, { recursive: true, force: true });
  cpSync(built, staging, { recursive: true, dereference: true });
  rmSync(to, { recursive: true, force: true });
  renameSync(staging, to);
  return true;
}

/** scripts/gpu-check.ts as the GPU artefact carries it: it starts llama-server through the agent's supervisor. */
async function bundleGpuCheck(outName) {
  const { build } = await import("esbuild");
  const result = await build({
    ...common,
    entryPoints: [join(root, "scripts/gpu-check.ts")],
    outfile: join(dist, "agent-gpu", outName),
    define: { MODELFORGE_LLAMA_SERVER: JSON.stringify("./llama-server/llama-server") },
    banner: { js: `#!/usr/bin/env node\n${requireBanner}` },
  });
  return result.outputFiles;
}
