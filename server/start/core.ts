// What every subsystem that needs the database is built with.
import type { Clock } from "../../common/clock.js";
import type { Logger } from "../observability/logger.js";
import type { Database } from "../db/client.js";

export interface Core {
  clock: Clock;
  log: Logger;
  db: Database;
}
