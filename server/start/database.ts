// The database: opened in the background while the port opens, so agents can pin the CA and load
// balancers see NOT_SERVING rather than a refused connection while an embedded database starts.
import type { Config } from "../config.js";
import type { Logger } from "../observability/logger.js";
import type { ServerMetrics } from "../observability/metrics.js";
import { openDatabase, type Database } from "../db/client.js";

export function openingDatabase(
  config: Pick<Config, "databaseUrl" | "dataDir" | "preparedStatements">,
  log: Logger,
  metrics: ServerMetrics | undefined,
): Promise<Database> {
  const opening = openDatabase({
    databaseUrl: config.databaseUrl,
    dataDir: config.dataDir,
    preparedStatements: config.preparedStatements,
    log,
    queryFailed: metrics?.queryFailed,
  });
  // Awaited only once the port is open; a failure before then is not unhandled.
  opening.catch(() => undefined);
  return opening;
}
