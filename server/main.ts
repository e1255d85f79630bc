// The control plane's entry point: configuration from the environment, one clear line on a failed
// start, graceful shutdown on SIGTERM and SIGINT (also while still starting).
import { loadConfig, type Config } from "./config.js";
import { createLogger } from "./observability/logger.js";
import { startServer, type RunningServer } from "./app.js";

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
