// What operators ask of deployments: create, change revision, drain, unload, delete. Each records
// the desired state (with its audit event) and asks the controller to act on it at once, so a
// drain stops new invokes before the RPC answers.
import { randomUUID } from "node:crypto";
import { Code, ConnectError } from "@connectrpc/connect";
import type { Deployment, DeploymentInstance, Prisma, PrismaClient } from "../../gen/prisma/client.js";
import type { Clock } from "../../common/clock.js";
import type { RuntimeProfileSpec } from "../../gen/proto/modelforge/jobs/v1/jobs_pb.js";
import { engineName } from "../runtimes/profile.js";
import { operatorActor, recordAudit } from "../audit/audit.js";
import { checkCommitName } from "../artifacts/rules.js";
import { MAX_COMMIT_FILES } from "../../common/artifacts.js";
import { chooseModelFile } from "../../common/model-file.js";
import {
  checkDeploymentName,
  DEFAULT_DRAIN_TIMEOUT_MS,
  DEFAULT_INVOKE_TIMEOUT_MS,
  DEFAULT_MAX_IN_FLIGHT,
  MAX_IN_FLIGHT,
  MAX_TIMEOUT_MS,
  type Desired,
} from "./rules.js";
import { capabilityOfStep } from "./specs.js";
import { whereIdOrName } from "./routes.js";
import { chooseNode, type PlacementDeps } from "./placement-snapshot.js";

export interface DesiredDeps extends PlacementDeps {
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
}

const invalid = (field: string, why: string) => new ConnectError(`${field}: ${why}`, Code.InvalidArgument);
const needed = Object.values(capabilityOfStep);

function timeoutOf(ms: number | undefined, field: string, fallback: number): number {
  if (ms === undefined) return fallback;
  if (ms > MAX_TIMEOUT_MS) throw invalid(field, "at most 1 hour");
  return ms;
}

/** Checks the profile exists and the commit is stored; the profile's engine. */
async function requireProfileAndFiles(deps: DesiredDeps, profile: string, repository: string, commit: string): Promise<string> {
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
  return engineName(spec.engine);
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

export async function createDeployment(deps: DesiredDeps, input: CreateDeploymentInput, correlationId: string): Promise<DeploymentRow> {
  const nameProblem = checkDeploymentName(input.name);
  if (nameProblem !== undefined) throw invalid("name", nameProblem);
  if ((input.nodeId === "") === (Object.keys(input.selector).length === 0)) {
    throw invalid("node_id", "give exactly one of node_id and selector");
  }
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
  const engine = await requireProfileAndFiles(deps, input.runtimeProfile, input.repository, input.commit);
  const modelFile = await requireModelFile(deps, input, input.modelFile);
  const id = randomUUID();
  const nodeId = await chooseNode(deps, { ...input, deploymentId: id, engine, capabilities: needed, targetRoot, modelFile });
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
          state: "loading",
          maxInFlight,
          invokeTimeoutMs,
          drainTimeoutMs,
          createdAt: now,
          updatedAt: now,
        },
      ],
      skipDuplicates: true,
    });
    if (made.count !== 1) throw new ConnectError(`a deployment named "${input.name}" exists`, Code.AlreadyExists);
    await audit(tx, "deployment.created", id, correlationId, now, {
      name: input.name,
      nodeId,
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
  correlationId: string,
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
    await audit(tx, "deployment.revision_changed", d.id, correlationId, now, {
      revision: String(revision),
      commit,
      runtimeProfile,
      modelFile,
    });
  });
  await deps.reconcile(d.id);
  return findRecord(deps.prisma, d.id);
}

/** Drain, unload or delete: each allowed from the states it makes sense from. */
export async function setDesired(
  deps: DesiredDeps,
  idOrName: string,
  desired: Exclude<Desired, "serving">,
  correlationId: string,
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
        correlationId,
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

function audit(
  tx: Prisma.TransactionClient,
  action: string,
  id: string,
  correlationId: string,
  now: Date,
  details: { [k: string]: string },
) {
  return recordAudit(tx, { actor: operatorActor, action, targetType: "deployment", targetId: id, correlationId, details }, now);
}
