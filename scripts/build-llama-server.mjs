// The built-in engine's runtime: llama.cpp's own llama-server, compiled from the llama.cpp source
// node-llama-cpp ships (node_modules/node-llama-cpp/llama/gitRelease.bundle, the release its
// prebuilt binaries are of) and linked against those prebuilt ggml libraries
// (@node-llama-cpp/linux-x64). So the compute kernels are node-llama-cpp's: the CPU variant
// (AVX2, AVX-512, ...) is chosen at run time on whatever x86-64 node runs it, and a GPU node adds
// the CUDA backend from node-llama-cpp's CUDA prebuilts. Only llama.cpp's model code, its common
// library and the server are compiled: about five minutes on two cores, once per build machine,
// which needs cmake, git and a C++ compiler. Nodes get the binary; never a compiler.
//
//   build/llama-server/llama-server   the binary (RUNPATH $ORIGIN)
//   build/llama-server/lib*.so        links to the prebuilt ggml libraries it loads
//   build/llama-server/build.json     what it was built from; a different input rebuilds it
//
// `node scripts/build-llama-server.mjs` builds it when it is missing or stale; scripts/build.mjs
// and the tests' global setup call the same function. Concurrent builders wait on one lock.
import { execFileSync } from "node:child_process";
import { createHash } from "node:crypto";
import {
  chmodSync,
  copyFileSync,
  existsSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  renameSync,
  rmSync,
  statSync,
  symlinkSync,
  writeFileSync,
} from "node:fs";
import { availableParallelism } from "node:os";
import { dirname, join, relative } from "node:path";
import { fileURLToPath } from "node:url";

const prebuiltPackage = "@node-llama-cpp/linux-x64";
const prebuiltBins = "bins/linux-x64";
/** How long a builder waits for another's lock before taking it as abandoned (a build takes about 8 minutes on two cores). */
const lockStaleMs = 30 * 60_000;

/** Where the engine is built, under the checkout. */
export const llamaServerDir = (root) => join(root, "build/llama-server");

/** What the binary is built from: a change to any of it rebuilds. */
function inputsOf(root) {
  const llamaPackage = join(root, "node_modules/node-llama-cpp");
  const prebuilt = join(root, "node_modules", prebuiltPackage);
  for (const [path, what] of [
    [join(llamaPackage, "llama/gitRelease.bundle"), "node-llama-cpp's llama.cpp source"],
    [join(prebuilt, prebuiltBins, "libggml.v0.4.0.so"), `${prebuiltPackage}'s prebuilt ggml`],
  ]) {
    if (!existsSync(path)) throw new Error(`build llama-server: ${what} is missing (${relative(root, path)}): run npm ci`);
  }
  return {
    release: JSON.parse(readFileSync(join(llamaPackage, "llama/llama.cpp.info.json"), "utf8")).tag,
    nodeLlamaCpp: JSON.parse(readFileSync(join(llamaPackage, "package.json"), "utf8")).version,
    prebuilt: JSON.parse(readFileSync(join(prebuilt, "package.json"), "utf8")).version,
    script: createHash("sha256").update(readFileSync(fileURLToPath(import.meta.url))).digest("hex").slice(0, 16),
  };
}

/** The prebuilt libraries llama-server loads: ggml, its base and every CPU variant. */
export function prebuiltLibraries(root) {
  const dir = join(root, "node_modules", prebuiltPackage, prebuiltBins);
  return readdirSync(dir)
    .filter((f) => /^libggml.*\.so$/.test(f))
    .map((f) => join(dir, f));
}

function isCurrent(out, inputs) {
  try {
    const built = JSON.parse(readFileSync(join(out, "build.json"), "utf8"));
    return JSON.stringify(built) === JSON.stringify(inputs) && statSync(join(out, "llama-server")).isFile();
  } catch {
    return false;
  }
}

function requireTool(command, args, install) {
  try {
    execFileSync(command, args, { stdio: "ignore" });
  } catch {
    throw new Error(`build llama-server: ${command} is missing; it is needed on the build machine only (${install})`);
  }
}

async function withLock(lockDir, fn) {
  mkdirSync(dirname(lockDir), { recursive: true });
  for (;;) {
    try {
      mkdirSync(lockDir);
      break;
    } catch (err) {
      if (err.code !== "EEXIST") throw err;
      const age = Date.now() - statSync(lockDir, { throwIfNoEntry: false })?.mtimeMs;
      if (age > lockStaleMs) rmSync(lockDir, { recursive: true, force: true });
      else await new Promise((r) => setTimeout(r, 1000));
    }
  }
  try {
    return await fn();
  } finally {
    rmSync(lockDir, { recursive: true, force: true });
  }
}

/** ggml as a CMake package made of the prebuilt libraries, for llama.cpp's LLAMA_USE_SYSTEM_GGML. */
function ggmlPackage(dir, root, source) {
  const bins = join(root, "node_modules", prebuiltPackage, prebuiltBins);
  const include = join(source, "ggml/include");
  writeFileSync(
    join(dir, "ggml-config.cmake"),
    [
      "add_library(ggml::ggml-base SHARED IMPORTED)",
      `set_target_properties(ggml::ggml-base PROPERTIES IMPORTED_LOCATION "${join(bins, "libggml-base.so")}" IMPORTED_NO_SONAME TRUE INTERFACE_INCLUDE_DIRECTORIES "${include}")`,
      "add_library(ggml::ggml SHARED IMPORTED)",
      `set_target_properties(ggml::ggml PROPERTIES IMPORTED_LOCATION "${join(bins, "libggml.v0.4.0.so")}" INTERFACE_INCLUDE_DIRECTORIES "${include}" INTERFACE_LINK_LIBRARIES ggml::ggml-base)`,
      "",
    ].join("\n"),
  );
}

function compile(root, out, inputs, log) {
  requireTool("cmake", ["--version"], "apt-get install cmake");
  requireTool("c++", ["--version"], "apt-get install g++");
  requireTool("git", ["--version"], "apt-get install git");
  mkdirSync(dirname(out), { recursive: true });
  const work = mkdtempSync(join(dirname(out), ".llama-server-build-"));
  try {
    const source = join(work, "llama.cpp");
    const build = join(work, "build");
    log(`build llama-server: llama.cpp ${inputs.release} from node-llama-cpp ${inputs.nodeLlamaCpp}'s source, against its prebuilt ggml`);
    execFileSync("git", ["clone", "--quiet", join(root, "node_modules/node-llama-cpp/llama/gitRelease.bundle"), source], { stdio: "ignore" });
    ggmlPackage(work, root, source);
    const started = Date.now();
    execFileSync(
      "cmake",
      [
        "-S",
        source,
        "-B",
        build,
        "-DCMAKE_BUILD_TYPE=Release",
        "-DLLAMA_USE_SYSTEM_GGML=ON",
        `-Dggml_DIR=${work}`,
        // llama.cpp's own code linked into the one binary; only ggml is shared (the prebuilt).
        "-DBUILD_SHARED_LIBS=OFF",
        "-DLLAMA_BUILD_TESTS=OFF",
        "-DLLAMA_BUILD_EXAMPLES=OFF",
        // No web UI (nothing fetched at configure time, nothing served), no TLS, no downloads.
        "-DLLAMA_BUILD_UI=OFF",
        "-DLLAMA_USE_PREBUILT_UI=OFF",
        "-DLLAMA_OPENSSL=OFF",
        "-DLLAMA_CURL=OFF",
        // Found beside the binary wherever it is installed, never at this machine's paths.
        "-DCMAKE_SKIP_BUILD_RPATH=ON",
        "-DCMAKE_EXE_LINKER_FLAGS=-Wl,-rpath,$ORIGIN",
      ],
      { stdio: ["ignore", "ignore", "inherit"] },
    );
    execFileSync("cmake", ["--build", build, "--target", "llama-server", "-j", String(availableParallelism())], {
      stdio: ["ignore", "ignore", "inherit"],
    });
    const staging = join(work, "out");
    mkdirSync(staging);
    copyFileSync(join(build, "bin/llama-server"), join(staging, "llama-server"));
    chmodSync(join(staging, "llama-server"), 0o755);
    // Links, not copies: the checkout's node_modules holds the libraries (a build copies them).
    for (const lib of prebuiltLibraries(root)) symlinkSync(relative(out, lib), join(staging, lib.split("/").at(-1)));
    writeFileSync(join(staging, "build.json"), `${JSON.stringify(inputs)}\n`);
    rmSync(out, { recursive: true, force: true });
    renameSync(staging, out);
    log(`build llama-server: built in ${Math.round((Date.now() - started) / 1000)} s`);
  } finally {
    rmSync(work, { recursive: true, force: true });
  }
}

/** The directory of a current llama-server build, compiled first when missing or stale. */
export async function ensureLlamaServer(root, log = (line) => process.stderr.write(`${line}\n`)) {
  const out = llamaServerDir(root);
  const inputs = inputsOf(root);
  if (isCurrent(out, inputs)) return out;
  return withLock(`${out}.lock`, () => {
    if (!isCurrent(out, inputs)) compile(root, out, inputs, log);
    return out;
  });
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  const root = fileURLToPath(new URL("..", import.meta.url));
  ensureLlamaServer(root).then(
    (dir) => process.stdout.write(`${join(dir, "llama-server")}\n`),
    (err) => {
      process.stderr.write(`${err.message}\n`);
      process.exit(1);
    },
  );
}
