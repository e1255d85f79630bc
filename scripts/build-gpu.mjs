// `npm run build -- --gpu`: dist/agent-gpu/, the node agent for GPU nodes. It is dist/agent/ (the
// bundle and llama-server/) plus node-llama-cpp's prebuilt CUDA backends of ggml, built from the
// same llama.cpp release as llama-server's, which loads one of them for a GPU replica
// (agent/engines/gpus.ts finds them by module resolution):
//
//   node_modules/@node-llama-cpp/linux-x64-cuda      CUDA 13 (from the registry)
//   node_modules/@node-llama-cpp/linux-x64-cuda-ext  CUDA 12, the fallback (from the registry)
//   gpu-check.mjs                                    scripts/gpu-check.ts, for an operator on the node
//
// The checkout's install points both CUDA packages at an empty stand-in (package.json overrides),
// so they are fetched here with `npm pack`, each checked against the sha512 integrity pinned in
// scripts/llama-cuda-prebuilts.json and kept in dist/.cache/ (a rebuild fetches nothing). Nothing
// is downloaded or compiled when the artefact is installed or run.
import { execFileSync } from "node:child_process";
import { createHash } from "node:crypto";
import { cpSync, existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, renameSync, rmSync, statSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";

const cudaPackages = ["@node-llama-cpp/linux-x64-cuda", "@node-llama-cpp/linux-x64-cuda-ext"];
// What dist/agent/ holds that the GPU artefact carries as it is.
const agentFiles = ["modelforge-agent.mjs", "llama-server"];

/** The sha512 integrity (npm's `dist.integrity` form) of a file. */
function integrityOf(path) {
  return `sha512-${createHash("sha512").update(readFileSync(path)).digest("base64")}`;
}

/**
 * The pins, checked against the node-llama-cpp the lockfile resolved: its prebuilts must be of the
 * same version as the JavaScript that loads them.
 */
function readPins(root, locked) {
  const pins = JSON.parse(readFileSync(join(root, "scripts/llama-cuda-prebuilts.json"), "utf8"));
  if (pins["node-llama-cpp"] !== locked) {
    throw new Error(
      `build --gpu: scripts/llama-cuda-prebuilts.json pins node-llama-cpp ${pins["node-llama-cpp"]}, the lockfile has ${locked}; ` +
        `update it (npm view ${cudaPackages[0]}@${locked} dist.integrity, and the same for ${cudaPackages[1]})`,
    );
  }
  for (const name of cudaPackages) {
    if (!/^sha512-[A-Za-z0-9+/]+={0,2}$/.test(pins.integrity?.[name] ?? "")) throw new Error(`build --gpu: no sha512 integrity pinned for ${name}`);
  }
  return pins.integrity;
}

/** The package's tarball from the cache, fetched from the registry (`npm pack`) when absent; verified either way. */
function cachedTarball(cache, name, version, integrity) {
  const file = join(cache, `${name.slice(1).replace("/", "-")}-${version}.tgz`);
  if (!existsSync(file)) {
    mkdirSync(cache, { recursive: true });
    const scratch = mkdtempSync(join(cache, ".pack-"));
    try {
      process.stderr.write(`build --gpu: fetching ${name}@${version} from the registry\n`);
      const [packed] = JSON.parse(execFileSync("npm", ["pack", `${name}@${version}`, "--json", "--pack-destination", scratch], { cwd: scratch, encoding: "utf8" }));
      renameSync(join(scratch, packed.filename), file);
    } finally {
      rmSync(scratch, { recursive: true, force: true });
    }
  }
  const got = integrityOf(file);
  if (got !== integrity) {
    rmSync(file, { force: true });
    throw new Error(`build --gpu: ${name}@${version} does not match its pinned integrity (got ${got}); removed it from the cache`);
  }
  return file;
}

/** Total size in bytes of the files under `path`. */
function treeBytes(path) {
  const st = statSync(path);
  if (!st.isDirectory()) return st.size;
  return readdirSync(path).reduce((sum, entry) => sum + treeBytes(join(path, entry)), 0);
}

/**
 * Writes dist/agent-gpu/ from dist/agent/ (built just before) and the prebuilts, and returns its
 * size in bytes. The unpacked CUDA packages (560 MB) of the previous artefact are kept when they
 * came from the same tarballs; everything else is written afresh into a staging directory that
 * then replaces the artefact.
 * `bundle` builds one esbuild target and returns its output files (scripts/build.mjs owns the
 * esbuild options and the llama-urls plugin the worker is built with).
 */
export async function buildGpuAgent({ root, dist, bundle }) {
  const lock = JSON.parse(readFileSync(join(root, "package-lock.json"), "utf8")).packages;
  const version = lock["node_modules/node-llama-cpp"].version;
  const integrity = readPins(root, version);
  const target = join(dist, "agent-gpu");
  const staging = join(dist, `.agent-gpu-${process.pid}`);
  const carriedStamp = "node_modules/.modelforge-prebuilts.json";
  rmSync(staging, { recursive: true, force: true });
  try {
    mkdirSync(staging, { recursive: true });
    for (const name of agentFiles) cpSync(join(dist, "agent", name), join(staging, name), { recursive: true });

    const manifest = JSON.parse(readFileSync(join(dist, "agent/package.json"), "utf8"));
    const packages = cudaPackages;
    writeFileSync(
      join(staging, "package.json"),
      `${JSON.stringify(
        {
          ...manifest,
          // How an installed agent is known to be the GPU build.
          name: "modelforge-agent-gpu",
          optionalDependencies: undefined,
          dependencies: Object.fromEntries(packages.map((n) => [n, version])),
          // Carried in node_modules/, never installed from a registry.
          bundleDependencies: packages,
        },
        null,
        2,
      )}\n`,
    );
    for (const file of await bundle("gpu-check.mjs")) writeFileSync(join(staging, "gpu-check.mjs"), file.contents, { mode: 0o755 });

    const previous = JSON.parse(existsSync(join(target, carriedStamp)) ? readFileSync(join(target, carriedStamp), "utf8") : "{}");
    for (const name of cudaPackages) {
      const to = join(staging, "node_modules", name);
      mkdirSync(dirname(to), { recursive: true });
      if (previous[name] === integrity[name] && existsSync(join(target, "node_modules", name, "package.json"))) {
        renameSync(join(target, "node_modules", name), to);
        continue;
      }
      const tarball = cachedTarball(join(dist, ".cache/llama-prebuilts"), name, version, integrity[name]);
      mkdirSync(to);
      // npm tarballs hold the package under package/.
      execFileSync("tar", ["-xzf", tarball, "-C", to, "--strip-components=1"]);
    }
    writeFileSync(join(staging, carriedStamp), `${JSON.stringify(Object.fromEntries(cudaPackages.map((n) => [n, integrity[n]])), null, 2)}\n`);

    rmSync(target, { recursive: true, force: true });
    renameSync(staging, target);
  } finally {
    rmSync(staging, { recursive: true, force: true });
  }
  return treeBytes(target);
}
