// Two rules of the server's one-way layering that madge (which finds file circles) does not see:
// - app.ts and start/ assemble the control plane: no module of it may import the assembly back
//   (only the entry point main.ts starts it, and only app.ts and start/ itself use start/);
// - no feature folder imports a folder that imports it back, even where no file circle closes.
// Usage: node scripts/check-wiring.mjs [ROOT], ROOT being server/ unless named (tests name a tree).
import { readdirSync, readFileSync } from "node:fs";
import { dirname, join, relative, resolve, sep } from "node:path";

const root = process.argv[2] ?? "server";

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

if (importsApp.length > 0) {
  console.error(`these modules import ${join(root, "app.ts")}, which only main.ts may (and start/, which only app.ts may): ${importsApp.join(", ")}`);
}
for (const [a, b, lines] of pairs) {
  console.error(`${a}/ and ${b}/ import each other (move what both need below them, or pass it in):`);
  for (const line of lines) console.error(`  ${line}`);
}
if (importsApp.length > 0 || pairs.length > 0) process.exit(1);
console.log(`wiring: no ${root} module imports app.ts; no two folders of ${root} import each other`);
