// What operators ask of deployments: create, change revision, scale, start, drain, unload, delete.
// Each records the desired state (with its audit event) and asks the controller to act on it at
// once, so a drain stops new invokes before the RPC answers. Replicas are placed by the controller,
// not here: one that fits nowhere waits as PENDING with its reason.
import { randomUUID } from "node:crypto";
import { Code, ConnectError } from "@connectrpc/connect";
import type { Deployment, DeploymentInstance, Prisma, PrismaClient } from "../../gen/prisma/client.js";
import type { Clock } from "../../common/clock.js";
import type { RuntimeProfileSpec } from "../../gen/proto/modelforge/jobs/v1/jobs_pb.js";
import { recordAudit, type Asked } from "../audit/audit.js";
import { checkCommitName } from "../artifacts/rules.js";
import { MAX_COMMIT_FILES } from "../../common/artifacts.js";
import { chooseModelFile } from "../../common/model-file.js";
import {
  checkDeploymentName,
  DEFAULT_DRAIN_TIMEOUT_MS,
  DEFAULT_INVOKE_TIMEOUT_MS,
  DEFAULT_MAX_IN_FLIGHT,
  MAX_IN_FLIGHT,
  MAX_REPLICAS,
  MAX_TIMEOUT_MS,
  type Desired,
} from "./rules.js";
import { whereIdOrName } from "../rpc/id-or-name.js";
import { checkAutoscaling, type AutoscaleRequest } from "./autoscale-rules.js";

export interface DesiredDeps {
  prisma: PrismaClient;
  clock: Clock;
  approvedRoots: string[];
  profiles: { spec(name: string): Promise<RuntimeProfileSpec | undefined> };
  /** Runs the controller over one deployment now. */
  reconcile(deploymentId: string): Promise<void>;
}

export type DeploymentRow = Deployment & { instances: DeploymentInstance[] };

export interface CreateDeploymentInput {
  name: string;
  nodeId: string;
  selector: { [key: string]: string };
  runtimeProfile: string;
  repository: string;
  commit: string;
  targetRoot: string;
  maxInFlight: number;
  invokeTimeoutMs: number | undefined;
  drainTimeoutMs: number | undefined;
  modelFile: string;
  /** Replicas wanted; undefined for 1. */
  replicas: number | undefined;
  /** 0 for 1. */
  maxPerNode: number;
  /** Set to let the autoscaler choose the replicas (replicas then stays undefined). */
  autoscaling: AutoscaleRequest | undefined;
}

const invalid = (field: string, why: string) => new ConnectError(`${field}: ${why}`, Code.InvalidArgument);

function replicasOf(n: number | undefined): number {
  if (n === undefined) return 1;
  if (!Number.isInteger(n) || n < 0 || n > MAX_REPLICAS) throw invalid("replicas", `from 0 to ${MAX_REPLICAS}`);
  return n;
}

function timeoutOf(ms: number | undefined, field: string, fallback: number): number {
  if (ms === undefined) return fallback;
  if (ms > MAX_TIMEOUT_MS) throw invalid(field, "at most 1 hour");
  return ms;
}

/** Checks the profile exists and the commit is stored. */
async function requireProfileAndFiles(deps: DesiredDeps, profile: string, repository: string, commit: string): Promise<void> {
  const spec = await deps.profiles.spec(profile);
  if (spec === undefined) {
    throw new ConnectError(`runtime profile "${profile}" not found; create it with 'forge runtimes create'`, Code.NotFound);
  }
  const files = await deps.prisma.storedArtifact.count({ where: { repository, commit } });
  if (files === 0) {
    throw new ConnectError(
      `${repository}@${commit} has no files in the artifact store; push them first with 'forge artifacts push'`,
      Code.FailedPrecondition,
    );
  }
}

/**
 * The commit's file the runtime loads: the one named, else (on a revision change) the current one
 * when the commit still holds it, else the commit's single .gguf. Checked here, at the request, so
 * a commit the rule cannot decide is refused with its files listed rather than failing on the node.
 */
async function requireModelFile(
  deps: DesiredDeps,
  at: { repository: string; commit: string },
  named: string,
  current = "",
): Promise<string> {
  const rows = await deps.prisma.storedArtifact.findMany({
    where: { repository: at.repository, commit: at.commit },
    select: { path: true },
    orderBy: { path: "asc" },
    take: MAX_COMMIT_FILES,
  });
  const paths = rows.map((r) => r.path);
  if (named === "" && current !== "" && paths.includes(current)) return current;
  const choice = chooseModelFile(paths, named);
  if (!choice.ok) throw invalid("model_file", `${choice.problem} (${at.repository}@${at.commit})`);
  return choice.path;
}

export async function findRecord(db: Pick<PrismaClient, "deployment">, idOrName: string): Promise<DeploymentRow> {
  if (idOrName === "") throw invalid("deployment", "is required: an id or a name");
  const d = await db.deployment.findFirst({ where: whereIdOrName(idOrName), include: { instances: true } });
  if (d === null) throw new ConnectError(`deployment ${idOrName} not found`, Code.NotFound);
  return d;
}

export async function createDeployment(deps: DesiredDeps, input: CreateDeploymentInput, asked: Asked): Promise<DeploymentRow> {
  const nameProblem = checkDeploymentName(input.name);
  if (nameProblem !== undefined) throw invalid("name", nameProblem);
  // Neither: any node that fits.
  if (input.nodeId !== "" && Object.keys(input.selector).length > 0) throw invalid("node_id", "give node_id or selector, not both");
  if (input.runtimeProfile === "") throw invalid("runtime_profile", "is required");
  checkCommitName({ repository: input.repository, commit: input.commit });
  const targetRoot = input.targetRoot === "" ? deps.approvedRoots[0] : input.targetRoot;
  if (targetRoot === undefined)
    throw new ConnectError("target_root: this server has no approved roots (MODELFORGE_APPROVED_ROOTS)", Code.FailedPrecondition);
  if (!deps.approvedRoots.includes(targetRoot))
    throw invalid("target_root", `must be one of the approved roots (${deps.approvedRoots.join(", ")})`);
  const maxInFlight = input.maxInFlight === 0 ? DEFAULT_MAX_IN_FLIGHT : input.maxInFlight;
  if (maxInFlight > MAX_IN_FLIGHT) throw invalid("max_in_flight", `from 1 to ${MAX_IN_FLIGHT} (0 for ${DEFAULT_MAX_IN_FLIGHT})`);
  const invokeTimeoutMs = timeoutOf(input.invokeTimeoutMs, "invoke_timeout", DEFAULT_INVOKE_TIMEOUT_MS);
  const drainTimeoutMs = timeoutOf(input.drainTimeoutMs, "drain_timeout", DEFAULT_DRAIN_TIMEOUT_MS);
  if (input.autoscaling !== undefined && input.replicas !== undefined) {
    throw invalid("replicas", "give replicas or autoscaling, not both (the autoscaler chooses the replicas)");
  }
  const scaling = input.autoscaling === undefined ? undefined : checkAutoscaling(input.autoscaling, maxInFlight);
  // Autoscaled from min_replicas, but at least one: a deployment that loads at once shows it works.
  const replicas = scaling === undefined ? replicasOf(input.replicas) : Math.max(1, scaling.minReplicas);
  const maxPerNode = input.maxPerNode === 0 ? 1 : input.maxPerNode;
  if (maxPerNode > MAX_REPLICAS) throw invalid("max_per_node", `from 1 to ${MAX_REPLICAS} (0 for 1)`);
  await requireProfileAndFiles(deps, input.runtimeProfile, input.repository, input.commit);
  const modelFile = await requireModelFile(deps, input, input.modelFile);
  const nodeId = input.nodeId === "" ? null : input.nodeId.toLowerCase();
  if (nodeId !== null && (await deps.prisma.node.count({ where: { id: nodeId } })) === 0) {
    throw new ConnectError(`node ${input.nodeId} not found`, Code.NotFound);
  }
  const id = randomUUID();
  const now = new Date(deps.clock.now());
  await deps.prisma.$transaction(async (tx) => {
    const made = await tx.deployment.createMany({
      data: [
        {
          id,
          name: input.name,
          nodeId,
          selector: input.selector,
          runtimeProfile: input.runtimeProfile,
          repository: input.repository,
          commit: input.commit,
          modelFile,
          targetRoot,
          revision: 1n,
          desired: "serving",
          state: replicas === 0 ? "unloaded" : "pending",
          replicas,
          maxPerNode,
          maxInFlight,
          invokeTimeoutMs,
          drainTimeoutMs,
          ...(scaling !== undefined ? { autoscale: true, ...scaling } : {}),
          createdAt: now,
          updatedAt: now,
        },
      ],
      skipDuplicates: true,
    });
    if (made.count !== 1) throw new ConnectError(`a deployment named "${input.name}" exists`, Code.AlreadyExists);
    await audit(tx, "deployment.created", id, asked, now, {
      name: input.name,
      nodeId: nodeId ?? "",
      replicas: String(replicas),
      ...(scaling !== undefined ? { autoscaling: describeScaling(scaling) } : {}),
      runtimeProfile: input.runtimeProfile,
      repository: input.repository,
      commit: input.commit,
      modelFile,
    });
  });
  await deps.reconcile(id);
  return findRecord(deps.prisma, id);
}

export async function updateRevision(
  deps: DesiredDeps,
  idOrName: string,
  change: { commit: string; runtimeProfile: string; modelFile: string },
  asked: Asked,
): Promise<DeploymentRow> {
  const d = await findRecord(deps.prisma, idOrName);
  if (d.desired !== "serving")
    throw new ConnectError(`deployment ${d.name} is ${d.desired}: only a serving deployment changes revision`, Code.FailedPrecondition);
  const commit = change.commit || d.commit;
  const runtimeProfile = change.runtimeProfile || d.runtimeProfile;
  if (commit === d.commit && runtimeProfile === d.runtimeProfile && (change.modelFile || d.modelFile) === d.modelFile) {
    throw new ConnectError("nothing changes: give another commit, runtime profile or model file", Code.InvalidArgument);
  }
  checkCommitName({ repository: d.repository, commit });
  await requireProfileAndFiles(deps, runtimeProfile, d.repository, commit);
  const modelFile = await requireModelFile(deps, { repository: d.repository, commit }, change.modelFile, d.modelFile);
  const now = new Date(deps.clock.now());
  const revision = d.revision + 1n;
  await deps.prisma.$transaction(async (tx) => {
    const moved = await tx.deployment.updateMany({
      where: { id: d.id, revision: d.revision, desired: "serving" },
      data: { revision, commit, runtimeProfile, modelFile, updatedAt: now },
    });
    if (moved.count !== 1) throw new ConnectError(`deployment ${d.name} changed meanwhile; retry`, Code.Aborted);
    await audit(tx, "deployment.revision_changed", d.id, asked, now, {
      revision: String(revision),
      commit,
      runtimeProfile,
      modelFile,
    });
  });
  await deps.reconcile(d.id);
  return findRecord(deps.prisma, d.id);
}

/**
 * Turns autoscaling on or changes it. The wanted replicas move into the new bounds at once (a
 * deployment at zero stays there until a request comes); the autoscaler takes it from there.
 */
export async function setScaling(deps: DesiredDeps, idOrName: string, request: AutoscaleRequest, asked: Asked): Promise<DeploymentRow> {
  const d = await findRecord(deps.prisma, idOrName);
  if (d.desired === "deleted") throw new ConnectError(`deployment ${d.name} is being deleted`, Code.FailedPrecondition);
  const scaling = checkAutoscaling(request, d.maxInFlight);
  const replicas =
    d.replicas === 0 && scaling.minReplicas === 0 ? 0 : Math.min(scaling.maxReplicas, Math.max(scaling.minReplicas, d.replicas, 1));
  const now = new Date(deps.clock.now());
  await deps.prisma.$transaction(async (tx) => {
    const moved = await tx.deployment.updateMany({
      where: { id: d.id, desired: d.desired, revision: d.revision, replicas: d.replicas },
      data: { autoscale: true, ...scaling, replicas, updatedAt: now },
    });
    if (moved.count !== 1) throw new ConnectError(`deployment ${d.name} changed meanwhile; retry`, Code.Aborted);
    await audit(tx, "deployment.autoscaling_set", d.id, asked, now, {
      name: d.name,
      from: String(d.replicas),
      to: String(replicas),
      autoscaling: describeScaling(scaling),
    });
  });
  await deps.reconcile(d.id);
  return findRecord(deps.prisma, d.id);
}

/** The settings in one line, for the audit. */
function describeScaling(s: ReturnType<typeof checkAutoscaling>): string {
  return (
    `min ${s.minReplicas}, max ${s.maxReplicas}, target ${s.targetInFlight} in flight, upscale delay ${s.upscaleDelayMs} ms, ` +
    `downscale delay ${s.downscaleDelayMs} ms, scale to zero after ${s.scaleToZeroAfterMs} ms, cold start timeout ${s.coldStartTimeoutMs} ms, ` +
    `priority ${s.priority}`
  );
}

/**
 * Sets the replicas wanted, and turns autoscaling off. A serving deployment grows or shrinks; a
 * drained or unloaded one is started again when scaled above 0 (one being deleted is not).
 */
export async function scaleDeployment(deps: DesiredDeps, idOrName: string, replicas: number, asked: Asked): Promise<DeploymentRow> {
  const wanted = replicasOf(replicas);
  const d = await findRecord(deps.prisma, idOrName);
  if (d.desired === "deleted") throw new ConnectError(`deployment ${d.name} is being deleted`, Code.FailedPrecondition);
  const desired = wanted > 0 ? "serving" : d.desired;
  const now = new Date(deps.clock.now());
  await deps.prisma.$transaction(async (tx) => {
    const moved = await tx.deployment.updateMany({
      where: { id: d.id, desired: d.desired, revision: d.revision },
      data: { replicas: wanted, desired, autoscale: false, updatedAt: now },
    });
    if (moved.count !== 1) throw new ConnectError(`deployment ${d.name} changed meanwhile; retry`, Code.Aborted);
    if (d.desired !== "serving" && desired === "serving") await restartFailed(tx, d, now);
    await audit(tx, "deployment.scaled", d.id, asked, now, {
      name: d.name,
      from: String(d.replicas),
      to: String(wanted),
      ...(d.autoscale ? { reason: "fixed by the operator: autoscaling off" } : {}),
    });
  });
  await deps.reconcile(d.id);
  return findRecord(deps.prisma, d.id);
}

/** Brings a drained, unloaded or failed deployment back to serving its wanted replicas (1 if it wanted none). */
export async function startDeployment(deps: DesiredDeps, idOrName: string, asked: Asked): Promise<DeploymentRow> {
  const d = await findRecord(deps.prisma, idOrName);
  if (d.desired === "deleted") throw new ConnectError(`deployment ${d.name} is being deleted`, Code.FailedPrecondition);
  const replicas = d.replicas === 0 ? 1 : d.replicas;
  const now = new Date(deps.clock.now());
  await deps.prisma.$transaction(async (tx) => {
    // The replicas read are matched too: a scale committed meanwhile is not written back over.
    const moved = await tx.deployment.updateMany({
      where: { id: d.id, desired: d.desired, revision: d.revision, replicas: d.replicas },
      data: { desired: "serving", replicas, updatedAt: now },
    });
    if (moved.count !== 1) throw new ConnectError(`deployment ${d.name} changed meanwhile; retry`, Code.Aborted);
    await restartFailed(tx, d, now);
    await audit(tx, "deployment.start_requested", d.id, asked, now, { name: d.name, replicas: String(replicas) });
  });
  await deps.reconcile(d.id);
  return findRecord(deps.prisma, d.id);
}

/** The operator asked again: the current revision's failed replicas wait to be placed afresh. */
async function restartFailed(tx: Prisma.TransactionClient, d: DeploymentRow, now: Date): Promise<void> {
  await tx.deploymentInstance.updateMany({
    where: { deploymentId: d.id, revision: d.revision, phase: "failed", jobId: null },
    data: { phase: "pending", nodeId: null, step: null, restarts: 0, reason: "started by operator", updatedAt: now },
  });
}

/** Drain, unload or delete: each allowed from the states it makes sense from. */
export async function setDesired(
  deps: DesiredDeps,
  idOrName: string,
  desired: Exclude<Desired, "serving">,
  asked: Asked,
): Promise<DeploymentRow> {
  const d = await findRecord(deps.prisma, idOrName);
  const from: { [k in Exclude<Desired, "serving">]: Desired[] } = {
    drained: ["serving", "drained"],
    unloaded: ["serving", "drained", "unloaded"],
    deleted: ["serving", "drained", "unloaded", "deleted"],
  };
  if (!from[desired].includes(d.desired as Desired)) {
    throw new ConnectError(`deployment ${d.name} is ${d.desired}; it cannot be ${desired}`, Code.FailedPrecondition);
  }
  if (d.desired !== desired) {
    const now = new Date(deps.clock.now());
    await deps.prisma.$transaction(async (tx) => {
      await tx.deployment.updateMany({ where: { id: d.id, desired: d.desired }, data: { desired, updatedAt: now } });
      await audit(
        tx,
        `deployment.${desired === "drained" ? "drain" : desired === "unloaded" ? "unload" : "delete"}_requested`,
        d.id,
        asked,
        now,
        {
          name: d.name,
        },
      );
    });
  }
  await deps.reconcile(d.id);
  return findRecord(deps.prisma, d.id).catch((err) => {
    // Deleted and removed in the same pass: answer what was asked of.
    if (err instanceof ConnectError && err.code === Code.NotFound) return { ...d, desired };
    throw err;
  });
}

function audit(tx: Prisma.TransactionClient, action: string, id: string, asked: Asked, now: Date, details: { [k: string]: string }) {
  return recordAudit(tx, { ...asked, action, targetType: "deployment", targetId: id, details }, now);
}
