// Once per test run, before any test file:
// - llama-server, the llama.cpp engine's runtime, built when missing or stale
//   (scripts/build-llama-server.mjs: minutes, once per checkout; then nearly free);
// - a migrated database that test/support/db.ts copies for each test database, instead of an
//   initdb (PGlite: seconds of CPU) and a migration each time. It is built by the server's own
//   openDatabase from the committed migrations on every run, so it can never drift from them.
import { execFileSync } from "node:child_process";
import { fileURLToPath } from "node:url";
import type { TestProject } from "vitest/node";
import { buildTemplate } from "./support/template.js";
import { testBackend } from "./support/db.js";

export default async function setup(project: TestProject): Promise<() => Promise<void>> {
  const build = fileURLToPath(new URL("../scripts/build-llama-server.mjs", import.meta.url));
  execFileSync(process.execPath, [build], { stdio: ["ignore", "ignore", "inherit"] });
  const template = await buildTemplate(testBackend());
  project.provide("databaseTemplate", template.location);
  return template.remove;
}
