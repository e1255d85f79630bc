// Assembles the control plane: CA and server certificate, database, services, one HTTP/2 TLS port
// serving Connect, gRPC and gRPC-Web. `startServer` is what `main` and the tests both run. Each
// subsystem is built in ./start/ from the narrow collaborators it uses, and brings its own RPCs,
// periodic loops and close; this file only orders them. Nothing imports it but main.ts.
import { setTimeout as delay } from "node:timers/promises";
import type { Config } from "./config.js";
import { systemClock, type Clock } from "../common/clock.js";
import type { Logger } from "./observability/logger.js";
import { ServerMetrics } from "./observability/metrics.js";
import { serveMetrics, type MetricsEndpoint } from "../common/metrics-endpoint.js";
import type { Database } from "./db/client.js";
import type { Ca } from "./identity/pki/ca.js";
import { edgeGuard } from "./edge/guard.js";
import { loadConsole } from "./ui/static.js";
import { followCluster } from "./cluster/follow.js";
import { sessionOpenTuning } from "./tuning.js";
import { openingDatabase } from "./start/database.js";
import { loadIdentity, openOperators, openServiceKeys, type Identity } from "./start/identity.js";
import { openListener, type Listener } from "./start/listener.js";
import { publicFace, servingRoutes, startingRoutes } from "./start/routes.js";
import { openCluster } from "./start/cluster.js";
import { openSessions } from "./start/sessions.js";
import { openJobs } from "./start/jobs.js";
import { openDeployments } from "./start/deployments.js";
import { openServing } from "./start/serving.js";
import { agentApi } from "./start/agents.js";
import { openUpgrades } from "./start/upgrades.js";
import { adminApi } from "./start/admin.js";
import { runLoops } from "./start/loops.js";
import { Drain, drainWithin } from "./invoke/drain.js";
import { openAiFrontDoor } from "./openai/front-door.js";

export interface RunningServer {
  /** e.g. https://127.0.0.1:8443 */
  url: string;
  port: number;
  ca: Ca;
  db: Database;
  /** Whether the node has an open Session on this server. */
  sessionsConnected(nodeId: string): boolean;
  /** Operators' streams (watches, logs) open here, each ended at once if its user is deactivated. */
  operatorStreams(): number;
  /** The Prometheus endpoint, when MODELFORGE_METRICS_ADDRESS is set. */
  metricsUrl: string | undefined;
  /** Not serving, then new invokes refused and those in flight drained, then sessions and streams end, the database closes. Idempotent. */
  stop(): Promise<void>;
}

export interface StartOptions {
  /** The clock every time rule reads (default: the system clock; tests drive a manual one). */
  clock?: Clock;
  /** Session opens at a time and waiting (default ./tuning.ts `sessionOpenTuning`; tests fill the queue with less). */
  sessionOpens?: { concurrent: number; queued: number };
  /** How often the invocation counts are written (default a minute; outage drills write them sooner). */
  invokeCountsFlushMs?: number;
}

export async function startServer(config: Config, log: Logger, options: StartOptions = {}): Promise<RunningServer> {
  const clock = options.clock ?? systemClock;
  const identity = await loadIdentity(config);
  // The port opens before the database is ready (./start/database.ts).
  const metrics = config.metricsAddress !== undefined ? new ServerMetrics() : undefined;
  const opening = openingDatabase(config, log, metrics);
  const face = publicFace();
  // The web console's static files (ui/dist); they need no database, so they are served from the start.
  const consoleFiles = await loadConsole(config.uiDir);
  if (!consoleFiles.built) log.warn({ dir: config.uiDir }, "web console not built (npm run build:ui): /ui/ answers 503");
  const listener = await openListener({
    config,
    log,
    clock,
    ca: identity.ca,
    tls: identity.tls,
    consoleFiles,
    // Limits and authentication from headers and TLS, before any body is read (./edge/guard.ts).
    guard: edgeGuard(identity.operatorKeys, log),
    starting: startingRoutes(face, { ca: identity.ca, minAgentVersion: config.minAgentVersion, log }),
  });
  let metricsEndpoint: MetricsEndpoint | undefined;
  if (metrics !== undefined && config.metricsAddress !== undefined) {
    metricsEndpoint = await serveMetrics(metrics.registry, config.metricsAddress);
    log.info({ url: metricsEndpoint.url }, "metrics serving");
  }
  const db = await opening.catch(async (err: unknown) => {
    await listener.abandon();
    await metricsEndpoint?.close();
    throw err;
  });
  const shutdown = new AbortController();
  const drain = new Drain();
  const parts = await assemble({ config, log, clock, options, identity, db, listener, metrics, shutdown: shutdown.signal, drain });
  listener.serve(servingRoutes(face, parts.services), config.sessionFastPath ? parts.serveSession : undefined, parts.frontDoors);
  if (!config.sessionFastPath) log.info("gRPC Sessions served by Connect's generic path (MODELFORGE_SESSION_FAST_PATH=off)");
  face.health.setServing();
  log.info({ url: listener.url, database: db.describe, replica: parts.cluster.bus.replicaId }, "control plane ready");
  const stopLoops = runLoops(clock, log, parts.loops);

  const closing = { log, clock, health: face.health, listener, drain, shutdown, graceMs: config.shutdownGraceMs, stopLoops };
  const closers = [parts.serving, parts.cluster, parts.sessions, db, { close: async () => metricsEndpoint?.close() }];
  let stopping: Promise<void> | undefined;
  return {
    url: listener.url,
    port: listener.port,
    ca: identity.ca,
    db,
    stop: () => (stopping ??= stopServer(closing, closers)),
    sessionsConnected: (nodeId) => parts.sessions.registry.isConnected(nodeId),
    operatorStreams: () => parts.operators.live.size,
    metricsUrl: metricsEndpoint?.url,
  };
}

/** However long the drain took, connections get this long to carry the sessions' typed endings. */
const endingFloorMs = 1_000;
/** After invokes drained, how long peers get to read their answers before connections close (real time: socket I/O, not a rule). */
const answerTailMs = 1_000;

interface Closing {
  log: Logger;
  clock: Clock;
  health: { setNotServing(): void; endWatches(): void };
  listener: Listener;
  drain: Drain;
  shutdown: AbortController;
  graceMs: number;
  stopLoops: () => Promise<void>;
}

/**
 * In order: not serving and no new connections; new invokes refused (`unavailable`, so callers go
 * to another replica) while those in flight finish, within the grace; only then do the sessions
 * they run over end, and the connections get what is left of the grace (at least `endingFloorMs`);
 * then each subsystem closes.
 */
async function stopServer(p: Closing, closers: readonly { close(): Promise<unknown> }[]): Promise<void> {
  p.log.info("shutting down");
  const deadline = p.clock.now() + p.graceMs;
  p.health.setNotServing();
  const closed = p.listener.stopAccepting();
  const answered = p.drain.inFlight > 0;
  const cut = await drainWithin(p.drain, p.clock, p.graceMs);
  if (cut > 0) p.log.warn({ inFlight: cut, graceMs: p.graceMs }, "shutdown grace ran out: cutting the invokes still in flight");
  // Answers just finished may still sit unread at a busy peer. Closing an HTTP/2 connection stops
  // its reading, so what the peer sends next (a WINDOW_UPDATE for what it read) meets a closed
  // socket, and the TCP reset that answers it discards the peer's unread data: the answer's tail.
  // The peers get a moment to read it while this side still reads (new invokes are refused).
  if (answered) await delay(Math.min(answerTailMs, Math.max(0, deadline - p.clock.now())));
  p.shutdown.abort();
  p.health.endWatches();
  await p.listener.endConnections(closed, Math.max(endingFloorMs, deadline - p.clock.now()));
  await p.stopLoops();
  for (const c of closers) await c.close();
  p.log.info("stopped");
}

interface AssembleDeps {
  config: Config;
  log: Logger;
  clock: Clock;
  options: StartOptions;
  identity: Identity;
  db: Database;
  listener: Listener;
  metrics: ServerMetrics | undefined;
  shutdown: AbortSignal;
  drain: Drain;
}

/** Every subsystem that needs the database, each from what it uses, in the order they depend on each other. */
async function assemble(deps: AssembleDeps) {
  const { config, log, clock, db, metrics, shutdown } = deps;
  const { ca } = deps.identity;
  const port = deps.listener.port;
  const cluster = await openCluster(config, db, log);
  const opens = deps.options.sessionOpens ?? sessionOpenTuning;
  const sessions = openSessions({ config, clock, log, db, cluster, shutdown, metrics, opens });
  const jobs = openJobs({ config, clock, log, db, cluster, sessions, shutdown, metrics });
  const deployments = openDeployments({ config, clock, log, db, cluster, jobs, metrics: metrics?.evictions });
  const operators = openOperators({ config, prisma: db.prisma, clock, log, bus: cluster.bus, breakGlass: deps.identity.operatorKeys });
  followCluster(cluster.bus, {
    sessions: sessions.registry,
    jobs: jobs.engine,
    deployments: deployments.controller,
    operators: operators.live,
  });
  const serviceKeys = openServiceKeys({
    prisma: db.prisma,
    direct: db.direct,
    clock,
    log,
    outage: db.outage,
    outageTrustMs: config.serviceKeyOutageTrustMs,
  });
  const serving = await openServing({
    config,
    clock,
    log,
    db,
    ca,
    cluster,
    sessions,
    deployments,
    port,
    shutdown,
    drain: deps.drain,
    metrics,
    countsFlushMs: deps.options.invokeCountsFlushMs,
  });
  deployments.countInFlightWith((deploymentId, revision, replica) => serving.relay.inFlightOf(deploymentId, revision, replica));
  deployments.evictionSeesServing((deploymentId, since) => serving.activity.servedSince(deploymentId, since));
  const upgrades = await openUpgrades({ config, clock, log, db, cluster, sessions, deployments });
  const agents = agentApi({ config, clock, log, db, ca, sessions, jobs, deployments, serving, upgrades, shutdown, metrics });
  const admin = adminApi(
    { config, clock, db, ca, sessions, port, replicaId: cluster.bus.replicaId, shutdown },
    { ...jobs.adminRpcs, ...deployments.adminRpcs, ...serviceKeys.rpcs, ...serving.adminRpcs, ...upgrades.adminRpcs, ...operators.rpcs },
  );
  return {
    cluster,
    sessions,
    serving,
    operators,
    serveSession: agents.serveSession,
    frontDoors: [openAiFrontDoor({ keys: serviceKeys.keys, relay: serving.relay, routes: deployments.routes, log }), operators.signIn],
    services: {
      log,
      outage: db.outage,
      operatorInterceptor: operators.interceptor,
      serviceKeyInterceptor: serviceKeys.interceptor,
      metrics,
      agent: agents.service,
      admin,
      deployment: serving.service,
    },
    loops: [...sessions.loops, ...jobs.loops, ...deployments.loops, ...serving.loops, ...upgrades.loops, deps.listener.ticketKeys],
  };
}
