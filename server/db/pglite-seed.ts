// A first start on the embedded database copies the initialised, migrated data directory that the
// build made (dist/server/pglite-template) instead of running PostgreSQL's initdb, which takes
// seconds of WebAssembly on a busy machine. Only a directory that does not exist yet is seeded:
// an existing one, even empty or damaged, is left to the normal open and its checks.
import { chmod, cp, mkdir, rename, rm, stat } from "node:fs/promises";
import { join, resolve } from "node:path";
import { errorCode } from "./errors.js";

/** Copies `template` to `<dataDir>/pglite` when that does not exist; says whether it did. */
export async function seedPgliteDir(dataDir: string, template: string): Promise<boolean> {
  const target = join(resolve(dataDir), "pglite");
  if ((await stat(target).catch(() => undefined)) !== undefined) return false;
  if ((await stat(join(template, "PG_VERSION")).catch(() => undefined)) === undefined) return false;
  await mkdir(resolve(dataDir), { recursive: true, mode: 0o700 });
  // Copied beside the target and renamed into place, so a crash mid-copy leaves no half directory
  // for the next start to mistake for a database.
  const staging = `${target}.seed-${process.pid}`;
  try {
    // Private from the start: the template itself is readable by everyone.
    await mkdir(staging, { mode: 0o700 });
    await cp(template, staging, { recursive: true });
    await chmod(staging, 0o700);
    await rename(staging, target);
    return true;
  } catch (err) {
    await rm(staging, { recursive: true, force: true });
    // Another process created it meanwhile: its open (and the directory lock) decides.
    if (errorCode(err) === "ENOTEMPTY" || errorCode(err) === "EEXIST") return false;
    throw err;
  }
}
