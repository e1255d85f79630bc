// The embedded database's directory: one process at a time (a lock file naming its pid, taken over
// from a process that died), and a preflight that names what is wrong with a damaged directory
// instead of letting PGlite fail obscurely.
import { constants as fsConstants } from "node:fs";
import { access, open, readFile, readdir, rm, stat } from "node:fs/promises";
import { join } from "node:path";
import { DatabaseOpenError, describeCause, errorCode } from "./errors.js";
import { once } from "./database.js";

const heldLocks = new Set<string>();

function processAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    return errorCode(err) === "EPERM";
  }
}

/**
 * PostgreSQL's own postmaster.pid does not protect a PGlite directory (every PGlite reports the
 * same pid and recovers over a live instance's files), so two processes could open it at once
 * and corrupt it. A lock file beside the directory prevents that; a lock left by a dead process
 * (kill -9, power loss) is taken over.
 */
export async function lockDataDir(lockPath: string, where: string): Promise<() => Promise<void>> {
  if (heldLocks.has(lockPath)) {
    throw new DatabaseOpenError(`embedded database at ${where} is already open in this process`, { kind: "pglite" });
  }
  heldLocks.add(lockPath); // synchronously, so concurrent opens in this process cannot both proceed
  try {
    for (let attempt = 0; ; attempt++) {
      try {
        const fh = await open(lockPath, "wx", 0o600);
        try {
          await fh.writeFile(`${process.pid}\n`);
        } finally {
          await fh.close();
        }
        return once(async () => {
          await rm(lockPath, { force: true });
          heldLocks.delete(lockPath);
        });
      } catch (err) {
        if (errorCode(err) !== "EEXIST" || attempt >= 2) {
          throw new DatabaseOpenError(`cannot lock embedded database at ${where} (${lockPath}): ${describeCause(err)}`, {
            kind: "pglite",
            cause: err,
          });
        }
        const content = await readFile(lockPath, "utf8").catch(() => "");
        const pid = Number.parseInt(content, 10);
        if (!(pid > 0)) {
          // Another process may have created the file and not yet written its pid.
          const age = Date.now() - ((await stat(lockPath).catch(() => undefined))?.mtimeMs ?? 0);
          if (age < 10_000) {
            throw new DatabaseOpenError(`embedded database at ${where} is being opened by another process (${lockPath} was just created)`, {
              kind: "pglite",
            });
          }
        } else if (pid !== process.pid && processAlive(pid)) {
          // (Our own pid in the file, while we do not hold it, is a lock from an earlier run that got
          // the same pid, typically pid 1 in a container.)
          throw new DatabaseOpenError(
            `embedded database at ${where} is in use by another process (pid ${pid}); stop it first, or delete ${lockPath} if that process is not a ModelForge server`,
            { kind: "pglite" },
          );
        }
        // Stale lock. Two processes racing over the same stale lock could both get here; the window
        // is a few microseconds at start-up only.
        await rm(lockPath, { force: true });
      }
    }
  } catch (err) {
    heldLocks.delete(lockPath);
    throw err;
  }
}

/** Checks what can be checked without starting PostgreSQL: the WebAssembly build aborts on some damage. */
export async function preflightPgliteDir(dir: string, where: string): Promise<void> {
  const damaged = (cause: string) =>
    new DatabaseOpenError(`embedded database at ${where} is damaged or unreadable: ${cause}`, { kind: "pglite" });
  const st = await stat(dir).catch(() => undefined);
  if (st === undefined) return; // first start: PGlite creates the cluster
  if (!st.isDirectory()) throw damaged("it is not a directory");
  let entries: string[];
  try {
    entries = await readdir(dir);
    await access(dir, fsConstants.R_OK | fsConstants.W_OK | fsConstants.X_OK);
  } catch (err) {
    throw damaged(describeCause(err));
  }
  if (entries.length === 0) return; // created by an earlier start that failed before initdb
  if (!entries.includes("PG_VERSION")) {
    throw damaged("PG_VERSION is missing but the directory is not empty (not a PostgreSQL data directory)");
  }
  let version: string;
  try {
    version = await readFile(join(dir, "PG_VERSION"), "utf8");
  } catch (err) {
    throw damaged(`cannot read PG_VERSION: ${describeCause(err)}`);
  }
  if (!/^\d+(\.\d+)?\s*$/.test(version)) throw damaged("PG_VERSION is empty or invalid");
  for (const required of ["global/pg_control", "base", "pg_wal"]) {
    const s = await stat(join(dir, required)).catch(() => undefined);
    if (s === undefined) throw damaged(`${required} is missing`);
    if (required === "global/pg_control" && s.size === 0) throw damaged("global/pg_control is empty");
  }
}
