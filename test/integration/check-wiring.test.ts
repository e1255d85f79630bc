// scripts/check-wiring.mjs, which `npm run cycles` runs in CI: it passes on server/ as it stands,
// and fails, naming the folders and the files, on trees built here to break its rules.
import { spawnSync } from "node:child_process";
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { afterAll, describe, expect, it } from "vitest";

const script = fileURLToPath(new URL("../../scripts/check-wiring.mjs", import.meta.url));
const repository = fileURLToPath(new URL("../..", import.meta.url));
const trees = mkdtempSync(join(tmpdir(), "check-wiring-"));
afterAll(() => rmSync(trees, { recursive: true, force: true }));

let count = 0;
/** A tree of the given files (path to text) under a fresh root. */
function tree(files: Record<string, string>): string {
  const root = join(trees, String(count++));
  for (const [path, text] of Object.entries(files)) {
    mkdirSync(dirname(join(root, path)), { recursive: true });
    writeFileSync(join(root, path), text);
  }
  return root;
}

function check(root?: string, layers?: string) {
  const args = root === undefined ? [script] : layers === undefined ? [script, root] : [script, root, layers];
  const r = spawnSync(process.execPath, args, { cwd: repository, encoding: "utf8" });
  return { status: r.status, stderr: r.stderr };
}

/** A layers document as docs/architecture.md writes it: `| N name | \`part\`, ... |` under the heading. */
function layersDoc(rows: string[][]): string {
  const path = join(trees, `layers-${count++}.md`);
  const table = rows.map((parts, i) => `| ${i + 1} layer | ${parts.map((p) => `\`${p}\``).join(", ")} |`).join("\n");
  writeFileSync(path, `# x\n\n## Layers of server/\n\n| layer | parts |\n|---|---|\n${table}\n`);
  return path;
}

describe("check-wiring", () => {
  it("passes on server/", () => {
    expect(check()).toEqual({ status: 0, stderr: "" });
  });

  it("passes a tree whose folders import one way", () => {
    const root = tree({
      "app.ts": 'import { a } from "./high/a.js";\n',
      "main.ts": 'import { start } from "./app.js";\n',
      "high/a.ts": 'import { b } from "../low/b.js";\nexport { c } from "../low/deep/c.js";\nconst d = await import("../low/d.js");\n',
      "low/b.ts": 'import { e } from "./e.js";\nimport { version } from "../version.js";\n',
      "low/deep/c.ts": "export const c = 1;\n",
      "version.ts": 'import { b } from "./low/b.js";\n',
    });
    expect(check(root)).toEqual({ status: 0, stderr: "" });
  });

  it("fails on two folders that import each other, naming both and every import between them", () => {
    const root = tree({
      "jobs/engine.ts": 'import type { Registry } from "../sessions/registry.js";\n',
      "jobs/dispatch.ts": "export const dispatch = 1;\n",
      "sessions/registry.ts": "export interface Registry {}\n",
      "sessions/deep/session.ts": 'import {\n  dispatch,\n} from "../../jobs/dispatch.js";\n',
      "nodes/view.ts": 'import type { Registry } from "../sessions/registry.js";\n',
    });
    const { status, stderr } = check(root);
    expect(status).toBe(1);
    expect(stderr).toContain(`${join(root, "jobs")}/ and ${join(root, "sessions")}/ import each other`);
    expect(stderr).toContain(`${join(root, "jobs/engine.ts")} -> ${join(root, "sessions/registry.ts")}`);
    expect(stderr).toContain(`${join(root, "sessions/deep/session.ts")} -> ${join(root, "jobs/dispatch.ts")}`);
    // nodes/ imports sessions/ one way only.
    expect(stderr).not.toContain("nodes");
  });

  it("sees re-exports and dynamic imports", () => {
    const root = tree({
      "edge/limits.ts": 'export { questionBytes } from "../reflection/reflection.js";\n',
      "reflection/reflection.ts": 'export const questionBytes = 1;\nconst edge = await import("../edge/validate.js");\n',
      "edge/validate.ts": "export const validate = 1;\n",
    });
    const { status, stderr } = check(root);
    expect(status).toBe(1);
    expect(stderr).toContain(`${join(root, "edge/limits.ts")} -> ${join(root, "reflection/reflection.ts")}`);
    expect(stderr).toContain(`${join(root, "reflection/reflection.ts")} -> ${join(root, "edge/validate.ts")}`);
  });

  it("fails on a module that imports app.ts, which only main.ts may", () => {
    const root = tree({
      "app.ts": "export const start = 1;\n",
      "main.ts": 'import { start } from "./app.js";\n',
      "jobs/engine.ts": 'import { start } from "../app.js";\n',
    });
    const { status, stderr } = check(root);
    expect(status).toBe(1);
    expect(stderr).toContain(`which only main.ts may (and start/, which only app.ts may): ${join(root, "jobs/engine.ts")}`);
  });

  describe("layers", () => {
    const files = {
      "db/client.ts": "export const db = 1;\n",
      "jobs/engine.ts": 'import { db } from "../db/client.js";\n',
      "invoke/relay.ts": 'import { engine } from "../jobs/engine.js";\nimport { c } from "../config.js";\n',
      "config.ts": "export const c = 1;\n",
    };

    it("passes a tree whose imports run down the layers, or within one", () => {
      const root = tree(files);
      expect(check(root, layersDoc([["db/", "config.ts"], ["jobs/"], ["invoke/"]]))).toEqual({ status: 0, stderr: "" });
      expect(check(root, layersDoc([["db/", "config.ts", "jobs/", "invoke/"]]))).toEqual({ status: 0, stderr: "" });
    });

    it("fails on an import up from a lower layer, naming the files and their layers", () => {
      const root = tree({ ...files, "db/client.ts": 'import { engine } from "../jobs/engine.js";\n' });
      const { status, stderr } = check(root, layersDoc([["db/", "config.ts"], ["jobs/"], ["invoke/"]]));
      expect(status).toBe(1);
      expect(stderr).toContain(`${join(root, "db/client.ts")} (layer 1) -> ${join(root, "jobs/engine.ts")} (layer 2)`);
    });

    it("fails on a folder or top-level file that no layer lists", () => {
      const root = tree(files);
      const { status, stderr } = check(root, layersDoc([["db/"], ["jobs/"], ["invoke/"]]));
      expect(status).toBe(1);
      expect(stderr).toContain("in no layer");
      expect(stderr).toContain("config.ts");
    });
  });
});
