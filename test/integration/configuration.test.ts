// docs/configuration.md lists every environment variable the control plane, the agent and the CLI
// read, and nothing else: a variable added to the code without a row, or a row left behind when
// the code stops reading it, fails here. What each program reads is found two ways: the server's
// loadConfig is called with an environment that records every name asked for, and every source
// file of each program is parsed for the variable names it mentions in code (identifiers and
// strings; comments do not count, nor build-time constants declared with `declare const`).
import { mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, relative } from "node:path";
import ts from "typescript";
import { describe, expect, it } from "vitest";
import { defaults, loadConfig } from "../../server/config.js";
import { repoRoot } from "../support/process.js";

const VARIABLE = /\b(?:MODELFORGE_[A-Z0-9_]+|DATABASE_URL)\b/g;
type Reader = "server" | "agent" | "CLI";

interface Row {
  name: string;
  readers: Reader[];
  defaultCell: string;
}

/** The rows of the configuration table: `| \`NAME\` | readers | default | meaning |`. */
function documented(): Row[] {
  const text = readFileSync(join(repoRoot, "docs/configuration.md"), "utf8");
  const rows: Row[] = [];
  for (const line of text.split("\n")) {
    const m = /^\| `([A-Z0-9_]+)` \| ([^|]+) \| ([^|]*) \|/.exec(line);
    if (!m) continue;
    const readers = m[2]!.split(",").map((r) => r.trim());
    for (const r of readers) expect(["server", "agent", "CLI"], `${m[1]}: reader "${r}"`).toContain(r);
    rows.push({ name: m[1]!, readers: readers as Reader[], defaultCell: m[3]!.trim() });
  }
  return rows;
}

function sourceFiles(dir: string): string[] {
  return readdirSync(join(repoRoot, dir), { withFileTypes: true, recursive: true })
    .filter((e) => e.isFile() && e.name.endsWith(".ts") && !e.name.endsWith(".d.ts"))
    .map((e) => join(e.parentPath, e.name));
}

/** The variable names a TypeScript file mentions in code. */
function namesInCode(path: string): Set<string> {
  const file = ts.createSourceFile(path, readFileSync(path, "utf8"), ts.ScriptTarget.Latest, true);
  const found = new Set<string>();
  const buildConstants = new Set<string>();
  const visit = (node: ts.Node): void => {
    if (ts.isVariableStatement(node) && node.modifiers?.some((m) => m.kind === ts.SyntaxKind.DeclareKeyword)) {
      for (const d of node.declarationList.declarations) if (ts.isIdentifier(d.name)) buildConstants.add(d.name.text);
    }
    const text = ts.isIdentifier(node) ? node.text : ts.isStringLiteral(node) || ts.isTemplateLiteralToken(node) ? node.text : undefined;
    for (const m of text?.matchAll(VARIABLE) ?? []) found.add(m[0]);
    ts.forEachChild(node, visit);
  };
  visit(file);
  for (const c of buildConstants) found.delete(c);
  return found;
}

/** Each name the files under `dirs` mention, with the first file it was found in. */
function namesRead(dirs: string[]): Map<string, string> {
  const where = new Map<string, string>();
  for (const dir of dirs) {
    for (const path of sourceFiles(dir)) {
      for (const name of namesInCode(path)) if (!where.has(name)) where.set(name, relative(repoRoot, path));
    }
  }
  return where;
}

/** The names the server's configuration asks its environment for. */
function namesLoadConfigAsks(): Set<string> {
  const asked = new Set<string>();
  const env = new Proxy({} as Record<string, string | undefined>, {
    get(_target, key) {
      if (typeof key === "string") asked.add(key);
      return undefined;
    },
  });
  loadConfig(env);
  return asked;
}

const rows = documented();
const documentedFor = (reader: Reader) => new Set(rows.filter((r) => r.readers.includes(reader)).map((r) => r.name));

describe("docs/configuration.md", () => {
  it("finds names in code, not in comments, and leaves build-time constants out", () => {
    const dir = mkdtempSync(join(tmpdir(), "mf-config-"));
    try {
      const path = join(dir, "x.ts");
      writeFileSync(
        path,
        [
          "// MODELFORGE_IN_A_COMMENT",
          "declare const MODELFORGE_BUILT_IN: string;",
          "const a = process.env.MODELFORGE_BY_PROPERTY;",
          'const b = env["MODELFORGE_BY_STRING"];',
          // biome-ignore lint/suspicious/noTemplateCurlyInString: TypeScript source holding a template literal
          "const c = `${a}: MODELFORGE_IN_A_TEMPLATE ${b}`;",
          "const d = DATABASE_URL;",
        ].join("\n"),
      );
      expect([...namesInCode(path)].sort()).toEqual([
        "DATABASE_URL",
        "MODELFORGE_BY_PROPERTY",
        "MODELFORGE_BY_STRING",
        "MODELFORGE_IN_A_TEMPLATE",
      ]);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it("has one row per variable", () => {
    const names = rows.map((r) => r.name);
    expect(names.length).toBeGreaterThan(40);
    expect(new Set(names).size).toBe(names.length);
  });

  it.each([
    ["server", ["server"]],
    ["agent", ["agent"]],
    ["CLI", ["cli"]],
  ] as [Reader, string[]][])("lists exactly the variables the %s reads", (reader, dirs) => {
    const read = namesRead(dirs);
    if (reader === "server") for (const name of namesLoadConfigAsks()) if (!read.has(name)) read.set(name, "server/config.ts (loadConfig)");
    const listed = documentedFor(reader);
    const undocumented = [...read].filter(([name]) => !listed.has(name)).map(([name, file]) => `${name} (${file})`);
    const notRead = [...listed].filter((name) => !read.has(name));
    expect(undocumented, `read by the ${reader} but not in docs/configuration.md`).toEqual([]);
    expect(notRead, `in docs/configuration.md as read by the ${reader}, which does not read it`).toEqual([]);
  });

  it("leaves no variable to common/, which every program shares", () => {
    expect([...namesRead(["common"]).keys()]).toEqual([]);
  });

  it("states the server's defaults as server/config.ts has them", () => {
    for (const [name, value] of Object.entries(defaults)) {
      if (name === "MODELFORGE_MIN_AGENT_VERSION") continue; // derived from the server's version
      expect(rows.find((r) => r.name === name)?.defaultCell, name).toBe(`\`${value}\``);
    }
  });
});
