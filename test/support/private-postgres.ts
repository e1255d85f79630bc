// A private PostgreSQL server for tests that must stop and start their database (outage drills):
// the installed PostgreSQL 15's initdb and pg_ctl, run as the non-root `postgres` user in a temp
// directory it owns, on its own loopback port. The shared server at 5432 is never touched.
import { execFile } from "node:child_process";
import { existsSync } from "node:fs";
import { chown, mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { promisify } from "node:util";
import { freePort } from "./ports.js";

const run = promisify(execFile);
const bin = "/usr/lib/postgresql/15/bin";
// By its path: a PATH without the sbin directories (a CI runner's, `env -i`) would not find it.
const runuser = ["/usr/sbin/runuser", "/sbin/runuser"].find((p) => existsSync(p));

/** Why a private PostgreSQL cannot be started here, or undefined when it can. */
export function privatePostgresProblem(): string | undefined {
  if (!existsSync(join(bin, "initdb"))) return `${bin}/initdb is not installed`;
  if (runuser === undefined) return "runuser is not installed";
  if (process.getuid?.() !== 0) return "the test needs root to run PostgreSQL as the postgres user";
  return undefined;
}

export interface PrivatePostgres {
  /** postgresql://postgres@127.0.0.1:<port>/postgres */
  url: string;
  port: number;
  /** pg_ctl stop -m fast: connections are terminated (57P01), new ones refused. */
  stop(): Promise<void>;
  start(): Promise<void>;
  /** Stops the server and removes its directory. Idempotent. */
  destroy(): Promise<void>;
}

async function asPostgres(tool: string, args: string[]): Promise<void> {
  await run(runuser!, ["-u", "postgres", "--", join(bin, tool), ...args], { timeout: 60_000 });
}

export async function startPrivatePostgres(): Promise<PrivatePostgres> {
  const dir = await mkdtemp(join(tmpdir(), "mf-pg-"));
  const { uid, gid } = await idsOf("postgres");
  await chown(dir, uid, gid);
  const data = join(dir, "data");
  const port = await freePort();
  await asPostgres("initdb", ["-D", data, "-U", "postgres", "--auth=trust", "--no-sync", "-E", "UTF8", "--locale=C"]);
  // Only loopback TCP, no unix socket in a shared directory, no durability (a test database).
  const options = `-c listen_addresses=127.0.0.1 -c port=${port} -c unix_socket_directories='' -c fsync=off -c synchronous_commit=off -c full_page_writes=off`;
  const start = () => asPostgres("pg_ctl", ["start", "-D", data, "-w", "-t", "60", "-l", join(dir, "server.log"), "-o", options]);
  const stop = () => asPostgres("pg_ctl", ["stop", "-D", data, "-m", "fast", "-w", "-t", "60"]);
  await start();
  let destroyed: Promise<void> | undefined;
  return {
    url: `postgresql://postgres@127.0.0.1:${port}/postgres`,
    port,
    start,
    stop,
    destroy: () =>
      (destroyed ??= (async () => {
        await asPostgres("pg_ctl", ["stop", "-D", data, "-m", "immediate", "-w", "-t", "60"]).catch(() => undefined);
        await rm(dir, { recursive: true, force: true });
      })()),
  };
}

async function idsOf(user: string): Promise<{ uid: number; gid: number }> {
  const [{ stdout: uid }, { stdout: gid }] = await Promise.all([run("id", ["-u", user]), run("id", ["-g", user])]);
  return { uid: Number(uid.trim()), gid: Number(gid.trim()) };
}
