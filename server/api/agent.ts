// modelforge.agent.v1.AgentService: the node-facing API. Unary calls and Session messages go
// through the same functions (../nodes/reports.ts, ../jobs), so both paths follow one set of rules.
import type { HandlerContext, ServiceImpl } from "@connectrpc/connect";
import { create } from "@bufbuild/protobuf";
import { durationFromMs, timestampNow } from "@bufbuild/protobuf/wkt";
import {
  AgentConfigSchema,
  type AgentService,
  EnrollResponseSchema,
  GetServerInfoResponseSchema,
  HeartbeatResponseSchema,
  RenewCredentialResponseSchema,
  type AgentConfig,
  type Instruction,
} from "../../gen/proto/modelforge/agent/v1/agent_pb.js";
import type { Config } from "../config.js";
import type { Ca } from "../identity/pki/ca.js";
import type { Logger } from "../observability/logger.js";
import { serverVersion, supportedProtocolVersions } from "../version.js";
import { callOf, withoutCertificate } from "../context.js";
import { authenticateNode, presentedIdentity } from "../identity/node-auth.js";
import { enroller } from "../identity/enrollment/enroll.js";
import { renewCredential } from "../nodes/lifecycle.js";
import { putInventory, putTelemetry } from "../nodes/reports.js";
import { pendingInstructions } from "../nodes/instructions.js";
import { connectSession, type SessionDeps } from "../sessions/session.js";
import { partitionCapabilities } from "../../common/capabilities.js";
import { ts } from "../rpc/convert.js";
import type { DirectQuery } from "../db/direct.js";

/** Built once per server: it only changes with the configuration. */
export function agentConfigOf(c: Config): AgentConfig {
  return create(AgentConfigSchema, {
    heartbeatInterval: durationFromMs(c.heartbeatIntervalMs),
    telemetryInterval: durationFromMs(c.telemetryIntervalMs),
    inventoryInterval: durationFromMs(c.inventoryIntervalMs),
    staleAfter: durationFromMs(c.staleAfterMs),
    offlineAfter: durationFromMs(c.offlineAfterMs),
    maxFutureSkew: durationFromMs(c.maxFutureSkewMs),
    renewRemainingFraction: c.renewRemainingFraction,
    maxProgressMessageBytes: 256,
  });
}

/** What the node-facing API works with: a Session's collaborators, plus the CA that enrolls and renews. */
export interface AgentServiceDeps extends SessionDeps {
  /** The database straight through its driver (enrollment's one statement). */
  direct: DirectQuery;
  ca: Ca;
  log: Logger;
  /** Lifetime of an issued node certificate. */
  credentialTtlMs: number;
}

function heartbeatResponse(deps: AgentServiceDeps, instructions: Instruction[], ignoredCapabilities: string[]) {
  return create(HeartbeatResponseSchema, { config: deps.agentConfig, instructions, serverTime: timestampNow(), ignoredCapabilities });
}

/** Needs no database: served from the moment the port opens. */
export function serverInfo(ca: Pick<Ca, "certPem" | "fingerprint">, minAgentVersion: string) {
  return create(GetServerInfoResponseSchema, {
    minAgentVersion,
    serverVersion,
    protocolVersions: [...supportedProtocolVersions],
    caCertificatePem: ca.certPem,
    caFingerprint: ca.fingerprint,
  });
}

export function agentService(
  deps: AgentServiceDeps,
  jobs: Pick<ServiceImpl<typeof AgentService>, "claimJob" | "reportJobProgress" | "completeJob" | "failJob">,
  downloads: Pick<ServiceImpl<typeof AgentService>, "downloadArtifactFile" | "downloadAgentRelease">,
): ServiceImpl<typeof AgentService> {
  const prisma = deps.prisma;
  const correlation = (ctx: HandlerContext) => callOf(ctx).correlationId;
  const enroll = enroller(deps);

  return {
    getServerInfo: () => serverInfo(deps.ca, deps.minAgentVersion),
    async enroll(req, ctx) {
      const enrolled = await enroll({
        token: req.token,
        csrPem: req.csrPem,
        nodeName: req.nodeName.trim(),
        agentVersion: req.agentVersion,
        correlationId: correlation(ctx),
        peerAddress: callOf(ctx).peerAddress,
      });
      return create(EnrollResponseSchema, {
        nodeId: enrolled.nodeId,
        certificatePem: enrolled.certPem,
        caCertificatePem: deps.ca.certPem,
        expiresAt: ts(enrolled.notAfter),
      });
    },
    async renewCredential(req, ctx) {
      // A node that is disabled may not renew; a decommissioned one has no active credential left.
      const { identity } = await authenticateNode(prisma, ctx, deps.clock);
      const issued = await renewCredential(deps, identity, req.csrPem, correlation(ctx));
      return create(RenewCredentialResponseSchema, { certificatePem: issued.certPem, expiresAt: ts(issued.notAfter) });
    },
    async heartbeat(req, ctx) {
      const { node } = await authenticateNode(prisma, ctx, deps.clock);
      deps.heartbeats.record(node.id, deps.clock.now());
      // A polling agent never says Hello: its heartbeat carries what it can do. The edge has
      // bounded the names; only those of the contract are recorded.
      const { known, unknown } = partitionCapabilities(req.capabilities);
      if (req.capabilities.length > 0 || (req.agentVersion !== "" && req.agentVersion !== node.agentVersion)) {
        await prisma.node.update({
          where: { id: node.id },
          data: {
            ...(req.capabilities.length > 0 ? { capabilities: known } : {}),
            ...(req.agentVersion !== "" ? { agentVersion: req.agentVersion } : {}),
          },
        });
      }
      return heartbeatResponse(deps, pendingInstructions(node), unknown);
    },
    async putInventory(req, ctx) {
      const { node } = await authenticateNode(prisma, ctx, deps.clock);
      return putInventory(deps.reports, node.id, req.report, correlation(ctx));
    },
    async putTelemetry(req, ctx) {
      const { node } = await authenticateNode(prisma, ctx, deps.clock);
      return putTelemetry(deps.reports, node.id, req.report);
    },
    async *session(requests, ctx) {
      const caller = callOf(ctx);
      yield* connectSession(deps, presentedIdentity(caller), requests, withoutCertificate(caller));
    },
    ...jobs,
    ...downloads,
  };
}
