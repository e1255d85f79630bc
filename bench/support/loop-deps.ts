// The server's periodic loops wired on their own, beside a real database, for benchmarks that time
// them one by one (bench/sweeps.ts, and the heartbeat bench's loop-cost line): the same functions
// server/app.ts runs, with every node "connected" to a registry that sends nowhere.
import type { PrismaClient } from "../../gen/prisma/client.js";
import type { Config } from "../../server/config.js";
import { systemClock } from "../../common/clock.js";
import { createLogger } from "../../server/observability/logger.js";
import { SessionRegistry } from "../../server/sessions/registry.js";
import { HeartbeatBook } from "../../server/liveness/heartbeats.js";
import { LivenessTracker } from "../../server/liveness/tracker.js";
import { JobEngine } from "../../server/jobs/engine.js";
import { jobSettingsOf } from "../../server/jobs/work.js";
import { RuntimeProfiles } from "../../server/runtimes/store.js";

export function loopDeps(prisma: PrismaClient, config: Config, connected: { nodeId: string; serial: string }[], persistEveryMs: number) {
  const clock = systemClock;
  const log = createLogger("warn");
  const sessions = new SessionRegistry();
  for (const c of connected)
    sessions.attach({
      nodeId: c.nodeId,
      serial: c.serial,
      embeddingEngines: [],
      queuedAt: () => 0,
      send: () => true,
      sendInvoke: () => true,
      close: () => undefined,
    });
  const heartbeats = new HeartbeatBook(persistEveryMs);
  const liveness = new LivenessTracker(heartbeats, { staleAfterMs: config.staleAfterMs, offlineAfterMs: config.offlineAfterMs }, clock);
  const shutdown = new AbortController();
  const engine = new JobEngine({
    prisma,
    clock,
    log,
    liveness,
    sessions,
    settings: jobSettingsOf(config),
    shutdown: shutdown.signal,
    profiles: new RuntimeProfiles({ prisma, clock }),
  });
  return { clock, log, sessions, heartbeats, liveness, engine, shutdown };
}
