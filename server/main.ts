// The control plane's entry point: configuration from the environment, one clear line on a failed
// start, graceful shutdown on SIGTERM and SIGINT (also while still starting).
import { fileURLToPath } from "node:url";
import { loadConfig, type Config } from "./config.js";
import { createLogger } from "./observability/logger.js";
import type { RunningServer } from "./app.js";
import { seedPgliteDir } from "./db/pglite-seed.js";

// The build (scripts/build.mjs) defines where it put an initialised embedded database, relative to
// this module's place in the repository; run from source there is none and PGlite runs initdb.
declare const MODELFORGE_PGLITE_TEMPLATE: string | undefined;

async function main(): Promise<void> {
  let config: Config;
  try {
    config = loadConfig(process.env);
  } catch (err) {
    process.stderr.write(`modelforge: configuration error: ${(err as Error).message}\n`);
    process.exit(2);
  }
  const log = createLogger(config.logLevel);
  let server: RunningServer | undefined;
  let stopRequested = false;
  const stop = (running: RunningServer) =>
    running.stop().then(
      () => process.exit(0),
      (err: unknown) => {
        log.error({ error: (err as Error).message }, "shutdown failed");
        process.exit(1);
      },
    );
  const onSignal = (signal: string) => {
    log.info({ signal }, "signal received");
    if (server !== undefined) void stop(server);
    else stopRequested = true;
  };
  process.once("SIGTERM", onSignal);
  process.once("SIGINT", onSignal);
  try {
    // The template is copied on the thread pool while the rest of the server's modules load: the
    // server is imported only now (in the build, a chunk of its own with the database packages).
    const seedStarted = performance.now();
    const template =
      config.databaseUrl === undefined && typeof MODELFORGE_PGLITE_TEMPLATE === "string"
        ? fileURLToPath(new URL(MODELFORGE_PGLITE_TEMPLATE, import.meta.url))
        : undefined;
    const seeding = template !== undefined ? seedPgliteDir(config.dataDir, template) : Promise.resolve(false);
    seeding.catch(() => undefined);
    const { startServer } = await import("./app.js");
    if (await seeding) {
      log.info({ template, ms: Math.round(performance.now() - seedStarted) }, "embedded database created from the build's template");
    }
    server = await startServer(config, log);
  } catch (err) {
    // One line, not a stack dump: the message names what failed and where.
    log.fatal({ error: (err as Error).message }, "start-up failed");
    process.stderr.write(`modelforge: start-up failed: ${(err as Error).message}\n`);
    process.exit(1);
  }
  if (stopRequested) void stop(server);
}

void main();
