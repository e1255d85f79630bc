// The node-facing API: enrollment, renewal, reports and the Session stream, built from the
// sessions, jobs, deployments and serving subsystems it answers for.
import type http2 from "node:http2";
import type { Config } from "../config.js";
import type { Ca } from "../identity/pki/ca.js";
import type { ServerMetrics } from "../observability/metrics.js";
import { agentConfigOf, agentService, type AgentServiceDeps } from "../api/agent.js";
import { serveGrpcSession } from "../sessions/session-grpc.js";
import { OpeningReads } from "../sessions/open.js";
import type { Sessions } from "./sessions.js";
import type { Jobs } from "./jobs.js";
import type { Deployments } from "./deployments.js";
import type { Serving } from "./serving.js";
import type { Upgrades } from "./upgrades.js";
import type { Core } from "./core.js";

export interface AgentsDeps extends Core {
  config: Config;
  ca: Ca;
  sessions: Sessions;
  jobs: Jobs;
  deployments: Deployments;
  serving: Serving;
  upgrades: Upgrades;
  shutdown: AbortSignal;
  metrics: ServerMetrics | undefined;
}

export function agentApi(deps: AgentsDeps) {
  const { config, clock, db } = deps;
  const { prisma } = db;
  const agentDeps: AgentServiceDeps = {
    prisma,
    direct: db.direct,
    openingReads: new OpeningReads(db.direct),
    clock,
    log: deps.log,
    ca: deps.ca,
    credentialTtlMs: config.credentialTtlMs,
    agentConfig: agentConfigOf(config),
    sessions: deps.sessions.registry,
    heartbeats: deps.sessions.heartbeats,
    admission: deps.sessions.admission,
    reports: { prisma, clock, maxFutureSkewMs: config.maxFutureSkewMs },
    jobs: deps.jobs.engine,
    deployments: { held: deps.deployments.held },
    upgrades: deps.upgrades.session,
    shutdown: deps.shutdown,
    outage: db.outage,
    relay: deps.serving.relay,
    metrics: deps.metrics?.sessions,
    minAgentVersion: config.minAgentVersion,
  };
  return {
    service: agentService(agentDeps, deps.jobs.agentRpcs, { ...deps.deployments.agentRpcs, ...deps.upgrades.agentRpcs }),
    serveSession: (stream: http2.ServerHttp2Stream, headers: http2.IncomingHttpHeaders) =>
      serveGrpcSession(agentDeps, stream, headers, deps.log),
  };
}
