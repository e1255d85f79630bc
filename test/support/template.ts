// The migrated template database of a test run (built by test/global-setup.ts, copied by
// createTestDatabase): the server's own openDatabase applies the committed migrations to an empty
// database, which is then closed and only ever copied.
import { randomBytes } from "node:crypto";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { openDatabase } from "../../server/db/client.js";
import { postgresAdmin, testPostgresBase, type TestBackend } from "./db.js";

export type TemplateLocation = { backend: "pglite"; dir: string } | { backend: "postgres"; database: string };

declare module "vitest" {
  export interface ProvidedContext {
    databaseTemplate: TemplateLocation;
  }
}

export interface Template {
  location: TemplateLocation;
  /** Deletes the template. */
  remove(): Promise<void>;
}

export async function buildTemplate(backend: TestBackend): Promise<Template> {
  const dataDir = await mkdtemp(join(tmpdir(), "mf-template-"));
  const removeDir = () => rm(dataDir, { recursive: true, force: true });
  try {
    if (backend === "pglite") {
      await (await openDatabase({ dataDir })).close();
      return { location: { backend, dir: join(dataDir, "pglite") }, remove: removeDir };
    }
    // Named per run: other runs may share the server.
    const database = `mf_template_${randomBytes(6).toString("hex")}`;
    await postgresAdmin(`CREATE DATABASE "${database}"`);
    const remove = async () => {
      await postgresAdmin(`DROP DATABASE IF EXISTS "${database}" WITH (FORCE)`);
      await removeDir();
    };
    try {
      const url = testPostgresBase();
      url.pathname = `/${database}`;
      // Closed before any copy: CREATE DATABASE ... TEMPLATE needs the template without sessions.
      await (await openDatabase({ databaseUrl: url.toString(), dataDir })).close();
    } catch (err) {
      await remove();
      throw err;
    }
    return { location: { backend, database }, remove };
  } catch (err) {
    await removeDir();
    throw err;
  }
}
