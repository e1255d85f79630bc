// Once per test run, before any test file: a migrated database that test/support/db.ts copies for
// each test database, instead of an initdb (PGlite: seconds of CPU) and a migration each time.
// It is built by the server's own openDatabase from the committed migrations on every run, so it
// can never drift from them.
import type { TestProject } from "vitest/node";
import { buildTemplate } from "./support/template.js";
import { testBackend } from "./support/db.js";

export default async function setup(project: TestProject): Promise<() => Promise<void>> {
  const template = await buildTemplate(testBackend());
  project.provide("databaseTemplate", template.location);
  return template.remove;
}
