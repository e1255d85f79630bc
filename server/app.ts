// Assembles the control plane: CA and server certificate, database, services, one HTTP/2 TLS port
// serving Connect, gRPC and gRPC-Web. `startServer` is what `main` and the tests both run.
import http2 from "node:http2";
import type { TLSSocket } from "node:tls";
import type { AddressInfo, Socket } from "node:net";
import { connectNodeAdapter, type ConnectNodeAdapterOptions } from "@connectrpc/connect-node";
import { createContextValues, type ConnectRouter } from "@connectrpc/connect";
import { publicUrlOf, replicaUrlOf, type Config } from "./config.js";
import { systemClock, type Clock } from "../common/clock.js";
import type { Logger } from "./observability/logger.js";
import { correlationHeader, correlationIdFrom } from "./observability/correlation.js";
import { callLogInterceptor } from "./observability/call-log.js";
import { processAllocator } from "./observability/allocator.js";
import { floodPolicy, FloodLogger } from "./observability/flood-log.js";
import { judgeHandshakeFailure } from "./observability/tls-handshake.js";
import { callerKey, peerOf, type Caller } from "./context.js";
import { isGrpcSession, serveGrpcSession } from "./sessions/session-grpc.js";
import { adminAuthInterceptor } from "./identity/admin-token.js";
import { loadOrCreateCa, type Ca } from "./identity/pki/ca.js";
import { validationInterceptor } from "./edge/validate.js";
import { undecodableAsInvalidArgument } from "./edge/decode-errors.js";
import { edgeAdapterOptions, edgeGuard } from "./edge/guard.js";
import { openDatabase, type Database } from "./db/client.js";
import { HealthState, healthService } from "./services/health.js";
import { SessionRegistry, shuttingDown } from "./sessions/registry.js";
import { HeartbeatBook } from "./liveness/heartbeats.js";
import { LivenessTracker } from "./liveness/tracker.js";
import { agentConfigOf, agentService, serverInfo, type AgentServiceDeps } from "./services/agent.js";
import { adminService } from "./services/admin.js";
import { JobEngine } from "./jobs/engine.js";
import { jobSettingsOf } from "./jobs/work.js";
import { agentJobs } from "./jobs/agent-rpc.js";
import { adminJobs } from "./jobs/admin-rpc.js";
import { ArtifactStore } from "./artifacts/store.js";
import { adminArtifacts } from "./artifacts/admin-rpc.js";
import { RuntimeProfiles } from "./runtimes/store.js";
import { adminRuntimeProfiles } from "./runtimes/admin-rpc.js";
import { DeploymentController } from "./deployments/controller.js";
import { adminDeployments } from "./deployments/admin-rpc.js";
import { reconcileHeld } from "./deployments/held.js";
import { agentArtifacts } from "./artifacts/agent-rpc.js";
import { ServiceKeys } from "./identity/service-keys.js";
import { adminServiceKeys } from "./identity/service-keys-rpc.js";
import { serviceKeyInterceptor } from "./identity/service-keys-auth.js";
import { InvokeRelay } from "./invoke/relay.js";
import { InvokeCounts } from "./invoke/counts.js";
import { LogWatches } from "./invoke/logs.js";
import { deploymentService } from "./invoke/service.js";
import { adminDeploymentLogs } from "./invoke/admin-rpc.js";
import { deploymentRoutes } from "./deployments/routes.js";
import { reconcileLiveness } from "./liveness/reconciler.js";
import { revokedSessionSweeper } from "./sessions/revocation.js";
import { every } from "./loop.js";
import { http2ServerTuning, listenBacklog, sessionOpenTuning } from "./tuning.js";
import { Admission } from "./sessions/admission.js";
import { OpeningReads } from "./sessions/open.js";
import { loadConsole } from "./ui/static.js";
import { ServerMetrics } from "./observability/metrics.js";
import { fleetCounts } from "./observability/metrics-db.js";
import { serveMetrics, type MetricsEndpoint } from "../common/metrics-endpoint.js";
import { openClusterBus } from "./cluster/bus.js";
import { followCluster } from "./cluster/follow.js";
import { registerReplica, replicaDirectory, replicaRefreshMs } from "./cluster/replicas.js";
import { ReplicaForwarder } from "./invoke/forward.js";
import { openLeadership } from "./cluster/leadership.js";
import { ReflectionIndex, reflectionServices, routeReflection } from "./reflection/reflection.js";
import { Health } from "../gen/proto/grpc/health/v1/health_pb.js";
import { AgentService } from "../gen/proto/modelforge/agent/v1/agent_pb.js";
import { AdminService } from "../gen/proto/modelforge/admin/v1/admin_pb.js";
import { DeploymentService } from "../gen/proto/modelforge/deployment/v1/deployment_pb.js";

export interface RunningServer {
  /** e.g. https://127.0.0.1:8443 */
  url: string;
  port: number;
  ca: Ca;
  db: Database;
  /** Whether the node has an open Session on this server. */
  sessionsConnected(nodeId: string): boolean;
  /** The Prometheus endpoint, when MODELFORGE_METRICS_ADDRESS is set. */
  metricsUrl: string | undefined;
  /** Stops accepting, ends open streams, closes the database. Idempotent. */
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
  const ca = await loadOrCreateCa(config.certsDir);
  const tls = await ca.ensureServerCertificate(config.certsDir, config.serverNames);
  // The port opens before the database is ready, so agents can pin the CA and load balancers see
  // NOT_SERVING rather than a refused connection while an embedded database starts.
  const metrics = config.metricsAddress !== undefined ? new ServerMetrics() : undefined;
  const opening = openDatabase({
    databaseUrl: config.databaseUrl,
    dataDir: config.dataDir,
    preparedStatements: config.preparedStatements,
    log,
    queryFailed: metrics?.queryFailed,
  });
  opening.catch(() => undefined);
  const health = new HealthState([AgentService.typeName, AdminService.typeName, DeploymentService.typeName]);
  // Reflection describes the public contract only; it is served from the first moment, like GetServerInfo.
  const reflection = new ReflectionIndex([AgentService, AdminService, DeploymentService, Health, ...reflectionServices]);
  const contextValues: ConnectNodeAdapterOptions["contextValues"] = (req) => {
    const correlationId = (req as unknown as Record<symbol, string>)[correlationSymbol] ?? correlationIdFrom(undefined);
    return createContextValues().set(callerKey, callerOf(req, correlationId, log));
  };
  let handle = connectNodeAdapter({
    routes: (router) => {
      router.service(Health, healthService(health));
      router.rpc(AgentService.method.getServerInfo, () => serverInfo(ca, config.minAgentVersion));
      routeReflection(router, reflection);
      undecodableAsInvalidArgument(router);
    },
    interceptors: [callLogInterceptor()],
    contextValues,
    ...edgeAdapterOptions,
    fallback: (_req, res) => {
      // Retry-After: agents come back this soon instead of backing off as from a dead server.
      res.writeHead(503, { "content-type": "application/json", "retry-after": "1" });
      res.end(JSON.stringify({ code: "unavailable", message: "control plane starting: database not ready" }));
    },
  });

  // Limits and authentication from headers and TLS, before any body is read (./edge/guard.ts).
  const operatorKeys = { admin: config.operatorApiKey, readOnly: config.operatorReadonlyKey };
  const guard = edgeGuard(operatorKeys, log);
  // The web console's static files (ui/dist); they need no database, so they are served from the start.
  const consoleFiles = await loadConsole(config.uiDir);
  if (!consoleFiles.built) log.warn({ dir: config.uiDir }, "web console not built (npm run build:ui): /ui/ answers 503");
  const server = http2.createSecureServer(
    {
      ...http2ServerTuning,
      key: tls.keyPem,
      cert: tls.certPem,
      ca: [ca.certPem],
      // One port for everyone: a client certificate is asked for but not required, and each RPC
      // decides whether it needs one.
      requestCert: true,
      rejectUnauthorized: false,
      allowHTTP1: true,
      ticketKeys: ca.sessionTicketKeys(clock.now()),
    },
    (req, res) => {
      const id = correlationIdFrom(req.headers[correlationHeader]);
      (req as unknown as Record<symbol, string>)[correlationSymbol] = id;
      res.setHeader(correlationHeader, id);
      if (consoleFiles.serve(req, res)) return;
      guard(req, res, id);
      handle(req, res);
    },
  );
  // gRPC Session streams skip the compatibility layer (one request/response pair per stream) and
  // are served on the core stream API; every other stream goes on to it as before.
  let serveSession: ((stream: http2.ServerHttp2Stream, headers: http2.IncomingHttpHeaders) => void) | undefined;
  const compat = server.listeners("stream") as ((...args: unknown[]) => void)[];
  if (compat.length !== 1) throw new Error("node:http2 no longer installs one compatibility stream listener");
  server.removeAllListeners("stream");
  server.on("stream", (stream, headers, ...rest) => {
    if (serveSession !== undefined && isGrpcSession(headers)) serveSession(stream, headers);
    else compat[0]!.call(server, stream, headers, ...rest);
  });
  // Failed handshakes: a client that no longer trusts our CA (an agent from before the CA was
  // replaced) at warn, through the flood-proof logger since anyone can cause it; probes and
  // scanners at debug. After a reset the TLS socket has lost its address and byte count; the raw
  // socket under it (Node's `_parent`) keeps both, once its address was read on connection (cached).
  const handshakeFailures = new FloodLogger(log, "TLS handshake failed", floodPolicy);
  // Raw sockets are tracked too: at the end of the shutdown grace every one is destroyed, since an
  // HTTP/2 session's own close waits for its socket to flush, which a half-open peer never lets
  // happen (nor does one stuck in its TLS handshake ever become a session).
  const sockets = new Set<Socket>();
  server.on("connection", (raw: Socket) => {
    void raw.remoteAddress;
    sockets.add(raw);
    raw.once("close", () => sockets.delete(raw));
  });
  server.on("tlsClientError", (err: NodeJS.ErrnoException, socket: TLSSocket) => {
    const raw = (socket as TLSSocket & { _parent?: Socket })._parent;
    const peer = socket.remoteAddress ?? raw?.remoteAddress ?? "unknown";
    const verdict = judgeHandshakeFailure({ code: err.code, bytesRead: raw?.bytesRead ?? socket.bytesRead });
    if (verdict.level === "warn") handshakeFailures.warn(peer, { code: err.code, reason: verdict.reason });
    else log.debug({ code: err.code ?? err.message, peer, reason: verdict.reason }, "TLS handshake failed");
  });
  const connections = new Set<http2.ServerHttp2Session>();
  server.on("session", (s) => {
    connections.add(s);
    s.on("close", () => connections.delete(s));
  });
  await new Promise<void>((resolve, reject) => {
    server.once("error", reject);
    server.listen({ port: config.port, host: config.listenAddress, backlog: listenBacklog }, () => {
      server.off("error", reject);
      resolve();
    });
  });
  const port = (server.address() as AddressInfo).port;
  const host = config.listenAddress.includes(":") ? `[${config.listenAddress}]` : config.listenAddress;
  const url = `https://${host === "0.0.0.0" || host === "[::]" ? "127.0.0.1" : host}:${port}`;
  log.info({ url, caFingerprint: ca.fingerprint, allocator: processAllocator() }, "control plane serving");
  let metricsEndpoint: MetricsEndpoint | undefined;
  if (metrics !== undefined && config.metricsAddress !== undefined) {
    metricsEndpoint = await serveMetrics(metrics.registry, config.metricsAddress);
    log.info({ url: metricsEndpoint.url }, "metrics serving");
  }

  let db: Database;
  try {
    db = await opening;
  } catch (err) {
    for (const c of connections) c.destroy();
    await new Promise<void>((resolve) => server.close(() => resolve()));
    await metricsEndpoint?.close();
    throw err;
  }
  // Each feature is built from the narrow collaborators it uses; nothing reaches back here.
  const prisma = db.prisma;
  const shutdown = new AbortController();
  // Replicas on one PostgreSQL: what needs a session on another replica goes through the bus, and
  // one of them at a time runs the reconcilers.
  const bus = await openClusterBus({ prisma, databaseUrl: config.databaseUrl, dataDir: config.dataDir, log, outage: db.outage });
  const leadership = await openLeadership({ databaseUrl: config.databaseUrl, replicaId: bus.replicaId, log, outage: db.outage });
  const sessions = new SessionRegistry((event) => bus.publish(event));
  // One listener for all sessions: with one per session, every open scanned thousands of them
  // (EventTarget checks each add for a duplicate), which showed in a profile of a restart storm
  // (bench/heartbeats.ts RESTARTS).
  shutdown.signal.addEventListener("abort", () => sessions.closeAll(shuttingDown()), { once: true });
  const heartbeats = new HeartbeatBook(Math.min(5_000, config.staleAfterMs / 3));
  const liveness = new LivenessTracker(heartbeats, { staleAfterMs: config.staleAfterMs, offlineAfterMs: config.offlineAfterMs }, clock);
  const profiles = new RuntimeProfiles({ prisma, clock });
  const jobs = new JobEngine({
    prisma,
    profiles,
    clock,
    log,
    liveness,
    sessions,
    settings: jobSettingsOf(config),
    shutdown: shutdown.signal,
    metrics: metrics?.jobs,
  });
  const opens = options.sessionOpens ?? sessionOpenTuning;
  const admission = new Admission(opens.concurrent, opens.queued);
  metrics?.observe({ sessions, admission, fleet: () => fleetCounts(prisma) });
  const artifacts = new ArtifactStore({ prisma, clock, dir: config.artifactDir });
  const deployments = new DeploymentController({
    prisma,
    clock,
    log,
    jobs,
    announce: (deploymentId) => bus.publish({ kind: "deployment", deploymentId }),
  });
  followCluster(bus, { sessions, jobs, deployments });
  const reconcileDeployment = (id: string) => deployments.reconcile(id);
  const serviceKeys = new ServiceKeys({ prisma, clock, outage: db.outage, outageTrustMs: config.serviceKeyOutageTrustMs });
  const routes = deploymentRoutes(prisma, deployments);
  const invokeCounts = new InvokeCounts();
  const logWatches = new LogWatches(sessions);
  // Replicas find each other through the database: an invoke for a node whose Session is on
  // another replica is forwarded there. On the embedded database there is only this one.
  const replica =
    config.databaseUrl !== undefined
      ? await registerReplica({ prisma, clock, replicaId: bus.replicaId, url: replicaUrlOf(config, port) })
      : undefined;
  const forwarder =
    replica !== undefined
      ? new ReplicaForwarder({
          directory: replicaDirectory({ prisma, clock, replicaId: bus.replicaId }),
          clock,
          replicaId: bus.replicaId,
          caPem: ca.certPem,
          outage: db.outage,
        })
      : undefined;
  const relay = new InvokeRelay({ sessions, routes, clock, log, counts: invokeCounts, logs: logWatches, forwarder, outage: db.outage });
  const agentDeps: AgentServiceDeps = {
    prisma,
    direct: db.direct,
    openingReads: new OpeningReads(db.direct),
    clock,
    log,
    ca,
    credentialTtlMs: config.credentialTtlMs,
    agentConfig: agentConfigOf(config),
    sessions,
    heartbeats,
    admission,
    reports: { prisma, clock, maxFutureSkewMs: config.maxFutureSkewMs },
    jobs,
    deployments: {
      held: (nodeId, held) => {
        const kick = (id: string) =>
          void reconcileDeployment(id).catch((err) => log.error({ err, deploymentId: id }, "deployment reconcile failed"));
        reconcileHeld({ prisma, clock, log, jobs, kick }, nodeId, held).catch((err) =>
          log.error({ err, nodeId }, "reconciling the deployments a node holds failed"),
        );
      },
    },
    shutdown: shutdown.signal,
    outage: db.outage,
    relay,
    metrics: metrics?.sessions,
    minAgentVersion: config.minAgentVersion,
  };
  const admin = adminService(
    {
      prisma,
      clock,
      sessions,
      liveness,
      defaultTtlMs: config.enrollmentTokenTtlMs,
      join: { serverUrl: publicUrlOf(config, port), caFingerprint: ca.fingerprint },
      watchIntervalMs: config.reconcileIntervalMs,
      replicaId: bus.replicaId,
      minAgentVersion: config.minAgentVersion,
      shutdown: shutdown.signal,
    },
    {
      ...adminJobs({ prisma, engine: jobs }),
      ...adminArtifacts(artifacts),
      ...adminRuntimeProfiles(profiles),
      ...adminDeployments({ prisma, clock, jobs, approvedRoots: config.approvedRoots, profiles, reconcile: reconcileDeployment }),
      ...adminServiceKeys(serviceKeys),
      ...adminDeploymentLogs({ routes, logs: logWatches, shutdown: shutdown.signal }),
    },
  );
  const connect = connectNodeAdapter({
    routes: (router: ConnectRouter) => {
      router.service(Health, healthService(health));
      router.service(
        AgentService,
        agentService(agentDeps, agentJobs({ prisma, clock, engine: jobs }), agentArtifacts({ prisma, clock, store: artifacts })),
      );
      router.service(AdminService, admin);
      router.service(DeploymentService, deploymentService(relay, routes));
      routeReflection(router, reflection);
      undecodableAsInvalidArgument(router);
    },
    interceptors: [
      callLogInterceptor(db.outage),
      serviceKeyInterceptor({ keys: serviceKeys, log, clock }),
      ...(metrics ? [metrics.interceptor()] : []),
      adminAuthInterceptor(operatorKeys),
      validationInterceptor(),
    ],
    contextValues,
    ...edgeAdapterOptions,
  });
  handle = connect;
  serveSession = (stream, headers) => serveGrpcSession(agentDeps, stream, headers, log);
  health.setServing();
  log.info({ url, database: db.describe, replica: bus.replicaId }, "control plane ready");

  const holderOf = (nodeId: string) => (sessions.isConnected(nodeId) ? bus.replicaId : null);
  const stopLoops = [
    every(
      clock,
      config.livenessFlushIntervalMs,
      "heartbeat flush",
      log,
      () =>
        metrics
          ? metrics.flushed(() => heartbeats.flush(db.direct, holderOf, bus.replicaId))
          : heartbeats.flush(db.direct, holderOf, bus.replicaId),
      db.outage,
    ),
    every(
      clock,
      config.reconcileIntervalMs,
      "liveness",
      log,
      async () => leadership.isLeader() && (await reconcileLiveness({ prisma, clock, liveness, log })),
      db.outage,
    ),
    every(clock, config.reconcileIntervalMs, "revoked sessions", log, revokedSessionSweeper({ prisma, clock, sessions }), db.outage),
    every(clock, config.reconcileIntervalMs, "jobs", log, () => jobs.sweep(leadership.isLeader()), db.outage),
    every(
      clock,
      config.reconcileIntervalMs,
      "deployments",
      log,
      async () => leadership.isLeader() && (await deployments.sweep()),
      db.outage,
    ),
    every(
      clock,
      options.invokeCountsFlushMs ?? 60_000,
      "invoke counts",
      log,
      () => invokeCounts.flush(prisma, new Date(clock.now())),
      db.outage,
    ),
    ...(replica !== undefined ? [every(clock, replicaRefreshMs, "replica record", log, replica.refresh, db.outage)] : []),
    // A new epoch's TLS session ticket keys (the same on every replica; older tickets then fall back to a full handshake).
    every(clock, 60_000, "session ticket keys", log, async () => {
      const keys = ca.sessionTicketKeys(clock.now());
      if (!keys.equals(server.getTicketKeys())) server.setTicketKeys(keys);
    }),
  ];

  let stopping: Promise<void> | undefined;
  const stop = () =>
    (stopping ??= (async () => {
      log.info("shutting down");
      health.setNotServing();
      const closed = new Promise<void>((resolve) => server.close(() => resolve()));
      shutdown.abort();
      for (const c of connections) c.close();
      const timer = setTimeout(() => {
        for (const c of connections) c.destroy();
        for (const raw of sockets) raw.destroy();
      }, config.shutdownGraceMs);
      await closed;
      clearTimeout(timer);
      await Promise.all(stopLoops.map((stopLoop) => stopLoop()));
      forwarder?.close();
      await replica?.remove().catch((err: unknown) => log.warn({ error: (err as Error).message }, "removing the replica record failed"));
      await leadership.close();
      await bus.close();
      await heartbeats
        .flush(db.direct, holderOf)
        .catch((err: unknown) => log.warn({ error: (err as Error).message }, "final heartbeat flush failed"));
      await invokeCounts
        .flush(prisma, new Date(clock.now()))
        .catch((err: unknown) => log.warn({ error: (err as Error).message }, "final invoke counts flush failed"));
      await db.close();
      await metricsEndpoint?.close();
      log.info("stopped");
    })());
  return { url, port, ca, db, stop, sessionsConnected: (nodeId) => sessions.isConnected(nodeId), metricsUrl: metricsEndpoint?.url };
}

const correlationSymbol = Symbol("correlationId");

function callerOf(req: { socket: unknown }, correlationId: string, log: Logger): Caller {
  return { correlationId, log: log.child({ correlationId }), ...peerOf(req.socket as TLSSocket) };
}
