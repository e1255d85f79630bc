// Three rules of the server's one-way layering that madge (which finds file circles) does not see:
// - app.ts and start/ assemble the control plane: no module of it may import the assembly back
//   (only the entry point main.ts starts it, and only app.ts and start/ itself use start/);
// - no feature folder imports a folder that imports it back, even where no file circle closes;
// - no folder or top-level file imports one of a higher layer, the layers being the table under
//   "Layers of server/" in docs/architecture.md (every folder and top-level file must be in it).
// Usage: node scripts/check-wiring.mjs [ROOT [LAYERS]]: server/ and docs/architecture.md unless
// named (tests name a tree, and a layers file when they test the layers).
import { existsSync, readdirSync, readFileSync } from "node:fs";
import { dirname, join, relative, resolve, sep } from "node:path";

const root = process.argv[2] ?? "server";
const layersFile = process.argv[3] ?? (process.argv[2] === undefined ? "docs/architecture.md" : undefined);

function sourceFiles(dir) {
  return readdirSync(dir, { withFileTypes: true }).flatMap((entry) => {
    const path = join(dir, entry.name);
    if (entry.isDirectory()) return sourceFiles(path);
    return path.endsWith(".ts") ? [path] : [];
  });
}

/** Relative specifiers of a file's static imports, re-exports and dynamic imports. */
function relativeImports(text) {
  return [...text.matchAll(/(?:^|[^\w$.])(?:from|import)\s*\(?\s*["'](\.{1,2}\/[^"']+)["']/gm)].map((m) => m[1]);
}

/** The top folder under the root that holds `path`, or undefined for a file at the root or outside it. */
function folderOf(path) {
  const parts = relative(root, path).split(sep);
  return parts.length > 1 && parts[0] !== ".." ? parts[0] : undefined;
}

const files = sourceFiles(root);
const imports = files.map((file) => ({
  file,
  targets: relativeImports(readFileSync(file, "utf8")).map((spec) => resolve(dirname(file), spec.replace(/\.js$/, ".ts"))),
}));

const assembly = resolve(root, "app.ts");
const entry = resolve(root, "main.ts");
const startDir = resolve(root, "start");
const inStart = (path) => resolve(path).startsWith(startDir + sep);
const importsApp = imports
  .filter(({ file, targets }) => resolve(file) !== entry && targets.includes(assembly))
  .map(({ file }) => file)
  .concat(imports.filter(({ file, targets }) => resolve(file) !== assembly && !inStart(file) && targets.some(inStart)).map(({ file }) => `${file} (start/)`));

/** "a>b" to the imports of folder a's files from folder b, each "file -> file". */
const between = new Map();
for (const { file, targets } of imports) {
  for (const target of targets) {
    const from = folderOf(file);
    const to = folderOf(target);
    if (from === undefined || to === undefined || from === to) continue;
    const key = `${from}>${to}`;
    if (!between.has(key)) between.set(key, new Set());
    between.get(key).add(`${file} -> ${join(root, relative(root, target))}`);
  }
}
const pairs = [...between.keys()]
  .map((key) => key.split(">"))
  .filter(([a, b]) => a < b && between.has(`${b}>${a}`))
  .map(([a, b]) => [join(root, a), join(root, b), [...between.get(`${a}>${b}`), ...between.get(`${b}>${a}`)]]);

/**
 * The layers, lowest first: rows `| N name | \`unit\`, ... |` of the table under the heading
 * "Layers of server/". A unit is a folder ("jobs") or a top-level file ("config.ts").
 */
function readLayers(file) {
  const text = readFileSync(file, "utf8");
  const section = text.slice(text.indexOf("Layers of server/"));
  const layers = new Map();
  for (const m of section.matchAll(/^\| *(\d+)[^|]*\|([^|]*)\|/gm)) {
    for (const unit of m[2].matchAll(/`([^`]+)`/g)) layers.set(unit[1].replace(/\/$/, ""), Number(m[1]));
  }
  return layers;
}

/** The unit under the root that holds `path`: its top folder, or the top-level file itself. */
function unitOf(path) {
  const parts = relative(root, path).split(sep);
  if (parts[0] === ".." || parts.length === 0) return undefined;
  return parts[0];
}

const upward = [];
const unlisted = new Set();
if (layersFile !== undefined && existsSync(layersFile)) {
  const layers = readLayers(layersFile);
  for (const { file, targets } of imports) {
    const from = unitOf(file);
    if (!layers.has(from)) unlisted.add(from);
    for (const target of targets) {
      const to = unitOf(target);
      if (to === undefined || to === from) continue;
      if (!layers.has(to)) unlisted.add(to);
      else if (layers.has(from) && layers.get(to) > layers.get(from)) {
        upward.push(`${file} (layer ${layers.get(from)}) -> ${join(root, relative(root, target))} (layer ${layers.get(to)})`);
      }
    }
  }
}

if (unlisted.size > 0) {
  console.error(`these parts of ${root} are in no layer of ${layersFile} (add each to its table): ${[...unlisted].sort().join(", ")}`);
}
if (upward.length > 0) {
  console.error(`these imports run up from a lower layer of ${root} to a higher one (${layersFile}); move what both need down, or pass it in:`);
  for (const line of upward) console.error(`  ${line}`);
}
if (importsApp.length > 0) {
  console.error(`these modules import ${join(root, "app.ts")}, which only main.ts may (and start/, which only app.ts may): ${importsApp.join(", ")}`);
}
for (const [a, b, lines] of pairs) {
  console.error(`${a}/ and ${b}/ import each other (move what both need below them, or pass it in):`);
  for (const line of lines) console.error(`  ${line}`);
}
if (importsApp.length > 0 || pairs.length > 0 || upward.length > 0 || unlisted.size > 0) process.exit(1);
console.log(
  `wiring: no ${root} module imports app.ts; no two folders of ${root} import each other${layersFile ? `; no import runs up a layer of ${layersFile}` : ""}`,
);
