// The deployment RPCs of modelforge.admin.v1.AdminService (the admin token is checked by the
// interceptor before these run).
import { create } from "@bufbuild/protobuf";
import type { ServiceImpl } from "@connectrpc/connect";
import {
  CreateDeploymentResponseSchema,
  DeleteDeploymentResponseSchema,
  DrainDeploymentResponseSchema,
  GetDeploymentResponseSchema,
  ScaleDeploymentResponseSchema,
  StartDeploymentResponseSchema,
  ListDeploymentRecordsResponseSchema,
  UnloadDeploymentResponseSchema,
  UpdateDeploymentRevisionResponseSchema,
  UpdateDeploymentScalingResponseSchema,
  CheckDeploymentHealthResponseSchema,
  type AdminService,
  type DeploymentAutoscaling,
} from "../../gen/proto/modelforge/admin/v1/admin_pb.js";
import { callOf } from "../context.js";
import { askedIn } from "../identity/operators/principal.js";
import { Code, ConnectError } from "@connectrpc/connect";
import { durationMs, positiveDurationMs } from "../rpc/time.js";
import { decodeOffset, encodePageToken, pageSizeOf, splitPage } from "../rpc/paging.js";
import { eventToProto, recordToProto as toProto, type InFlightOf } from "./codec.js";
import {
  createDeployment,
  findRecord,
  scaleDeployment,
  setDesired,
  setScaling,
  startDeployment,
  updateRevision,
  type DesiredDeps,
} from "./desired.js";
import type { AutoscaleRequest } from "./autoscale-rules.js";
import { scalingEventOf, scalingActions } from "./codec.js";
import { checkHealth, DEFAULT_HEALTH_WAIT_MS, type HealthDeps } from "./health.js";

type DeploymentRpcs = Pick<
  ServiceImpl<typeof AdminService>,
  | "createDeployment"
  | "getDeployment"
  | "listDeploymentRecords"
  | "updateDeploymentRevision"
  | "scaleDeployment"
  | "updateDeploymentScaling"
  | "startDeployment"
  | "drainDeployment"
  | "unloadDeployment"
  | "deleteDeployment"
  | "checkDeploymentHealth"
>;

const HISTORY = 200;
const SCALING_HISTORY = 50;

/** The settings as the contract carries them; durations unset for their defaults. */
function autoscaleRequestOf(a: DeploymentAutoscaling): AutoscaleRequest {
  const ms = (d: DeploymentAutoscaling["upscaleDelay"], field: string) => (d === undefined ? undefined : durationMs(d, field));
  return {
    minReplicas: a.minReplicas,
    maxReplicas: a.maxReplicas,
    targetInFlight: a.targetInFlight,
    upscaleDelayMs: ms(a.upscaleDelay, "autoscaling.upscale_delay"),
    downscaleDelayMs: ms(a.downscaleDelay, "autoscaling.downscale_delay"),
    scaleToZeroAfterMs: ms(a.scaleToZeroAfter, "autoscaling.scale_to_zero_after"),
    coldStartTimeoutMs: ms(a.coldStartTimeout, "autoscaling.cold_start_timeout"),
    priority: a.priority,
  };
}

export function adminDeployments(deps: DesiredDeps & HealthDeps & { inFlight?: InFlightOf }): DeploymentRpcs {
  const recordToProto = (d: Parameters<typeof toProto>[0]) => toProto(d, deps.inFlight);
  return {
    async createDeployment(req, ctx) {
      const d = await createDeployment(
        deps,
        {
          name: req.name,
          nodeId: req.nodeId,
          selector: req.selector,
          runtimeProfile: req.runtimeProfile,
          repository: req.repository,
          commit: req.commit,
          targetRoot: req.targetRoot,
          maxInFlight: req.maxInFlight,
          invokeTimeoutMs: req.invokeTimeout !== undefined ? positiveDurationMs(req.invokeTimeout) : undefined,
          drainTimeoutMs: req.drainTimeout !== undefined ? positiveDurationMs(req.drainTimeout) : undefined,
          modelFile: req.modelFile,
          replicas: req.replicas,
          maxPerNode: req.maxPerNode,
          autoscaling: req.autoscaling === undefined ? undefined : autoscaleRequestOf(req.autoscaling),
        },
        askedIn(ctx),
      );
      return create(CreateDeploymentResponseSchema, { deployment: recordToProto(d) });
    },
    async getDeployment(req) {
      const d = await findRecord(deps.prisma, req.deployment);
      const [events, scaling] = await Promise.all([
        deps.prisma.deploymentEvent.findMany({ where: { deploymentId: d.id }, orderBy: { seq: "desc" }, take: HISTORY }),
        deps.prisma.auditEvent.findMany({
          where: { targetId: d.id, action: { in: scalingActions } },
          orderBy: { seq: "desc" },
          take: SCALING_HISTORY,
        }),
      ]);
      return create(GetDeploymentResponseSchema, {
        deployment: recordToProto(d),
        events: events.reverse().map(eventToProto),
        scalingEvents: scaling.reverse().map(scalingEventOf),
      });
    },
    async listDeploymentRecords(req) {
      const size = pageSizeOf(req.pageSize);
      const offset = decodeOffset(req.pageToken);
      const rows = await deps.prisma.deployment.findMany({
        include: { instances: true },
        orderBy: { name: "asc" },
        skip: offset,
        take: size + 1,
      });
      const { page, more } = splitPage(rows, size);
      return create(ListDeploymentRecordsResponseSchema, {
        deployments: page.map((d) => recordToProto(d)),
        nextPageToken: more ? encodePageToken(String(offset + size)) : "",
      });
    },
    async updateDeploymentRevision(req, ctx) {
      const d = await updateRevision(
        deps,
        req.deployment,
        { commit: req.commit, runtimeProfile: req.runtimeProfile, modelFile: req.modelFile },
        askedIn(ctx),
      );
      return create(UpdateDeploymentRevisionResponseSchema, { deployment: recordToProto(d) });
    },
    async scaleDeployment(req, ctx) {
      const d = await scaleDeployment(deps, req.deployment, req.replicas, askedIn(ctx));
      return create(ScaleDeploymentResponseSchema, { deployment: recordToProto(d) });
    },
    async updateDeploymentScaling(req, ctx) {
      if (req.autoscaling === undefined) throw new ConnectError("autoscaling: is required", Code.InvalidArgument);
      const d = await setScaling(deps, req.deployment, autoscaleRequestOf(req.autoscaling), askedIn(ctx));
      return create(UpdateDeploymentScalingResponseSchema, { deployment: recordToProto(d) });
    },
    async startDeployment(req, ctx) {
      const d = await startDeployment(deps, req.deployment, askedIn(ctx));
      return create(StartDeploymentResponseSchema, { deployment: recordToProto(d) });
    },
    async drainDeployment(req, ctx) {
      const d = await setDesired(deps, req.deployment, "drained", askedIn(ctx));
      return create(DrainDeploymentResponseSchema, { deployment: recordToProto(d) });
    },
    async unloadDeployment(req, ctx) {
      const d = await setDesired(deps, req.deployment, "unloaded", askedIn(ctx));
      return create(UnloadDeploymentResponseSchema, { deployment: recordToProto(d) });
    },
    async deleteDeployment(req, ctx) {
      const d = await setDesired(deps, req.deployment, "deleted", askedIn(ctx));
      return create(DeleteDeploymentResponseSchema, { deployment: recordToProto(d) });
    },
    async checkDeploymentHealth(req, ctx) {
      const waitMs = req.wait !== undefined ? positiveDurationMs(req.wait) : DEFAULT_HEALTH_WAIT_MS;
      const revisions = await checkHealth(deps, req.deployment, waitMs, callOf(ctx).correlationId, ctx.signal);
      return create(CheckDeploymentHealthResponseSchema, { revisions });
    },
  };
}
