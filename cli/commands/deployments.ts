// forge deployments create | list | get | revision | scale | autoscale | start | drain | unload | delete
import {
  CheckDeploymentHealthResponseSchema,
  CreateDeploymentResponseSchema,
  DeleteDeploymentResponseSchema,
  DeploymentDesiredState,
  DrainDeploymentResponseSchema,
  GetDeploymentResponseSchema,
  ListDeploymentRecordsResponseSchema,
  ScaleDeploymentResponseSchema,
  StartDeploymentResponseSchema,
  UnloadDeploymentResponseSchema,
  UpdateDeploymentRevisionResponseSchema,
  UpdateDeploymentScalingResponseSchema,
  type DeploymentAutoscaling,
  type DeploymentRecord,
} from "../../gen/proto/modelforge/admin/v1/admin_pb.js";
import { DeploymentState } from "../../gen/proto/modelforge/deployment/v1/deployment_pb.js";
import type { MessageInitShape } from "@bufbuild/protobuf";
import type { DeploymentAutoscalingSchema } from "../../gen/proto/modelforge/admin/v1/admin_pb.js";
import {
  command,
  durationOption,
  idArg,
  intOption,
  parseLabels,
  repeatableOption,
  textOption,
  UsageError,
  valueOption,
  type Command,
  type Context,
  type Group,
} from "../args.js";
import { dateOf, enumName, fields, formatAge, formatLabels, formatTime, table } from "../format.js";
import { printList, printReply } from "../output.js";
import { pagedListCommand } from "../list.js";

const state = (s: DeploymentState | undefined) => enumName(DeploymentState, s ?? DeploymentState.UNSPECIFIED);
const desired = (s: DeploymentDesiredState) => enumName(DeploymentDesiredState, s);

function describe(ctx: Context, r: DeploymentRecord): string {
  const d = r.deployment!;
  const now = ctx.now();
  return (
    fields([
      ["ID", d.id],
      ["Name", d.name],
      ["State", state(d.state)],
      ["Desired", desired(r.desired)],
      ["Revision", String(d.revision)],
      ["Replicas", `${r.readyReplicas}/${r.desiredReplicas} ready (at most ${r.maxPerNode} per node)`],
      ["Selector", Object.keys(r.selector).length > 0 ? formatLabels(r.selector) : undefined],
      ["Profile", r.runtimeProfile],
      ["Artifact", `${r.repository}@${r.commit}`],
      ["Model file", r.modelFile || "(the commit's single .gguf)"],
      ["Target root", r.targetRoot],
      ["In flight", `at most ${r.maxInFlight}`],
      [
        "Autoscaling",
        r.autoscaling !== undefined ? describeAutoscaling(r.autoscaling) : "off (a fixed count: forge deployments autoscale turns it on)",
      ],
      ["Failure", d.failureReason || undefined],
      ["Updated", formatAge(dateOf(d.updatedAt), now)],
    ]) +
    (r.replicas.length > 0
      ? `\nReplicas\n${table(
          ["REPLICA", "REVISION", "NODE", "GPUS", "STATE", "IN FLIGHT", "RESTARTS", "REASON"],
          r.replicas.map((i) => [
            String(i.index),
            String(i.revision),
            i.nodeId || "-",
            // Index then UUID: the index is what CUDA_VISIBLE_DEVICES names, the UUID what stays.
            i.gpus.map((g) => `${g.index}:${g.uuid}`).join(",") || "-",
            state(i.state),
            String(i.inFlight),
            String(i.restarts),
            i.reason || "-",
          ]),
        )}`
      : "")
  );
}

const nameArg = (positionals: string[]) => idArg(positionals, "deployment name or id");

const seconds = (d: { seconds: bigint; nanos: number } | undefined) => (d === undefined ? 0 : Number(d.seconds) + d.nanos / 1e9);

/** The settings in one line. Pure. */
export function describeAutoscaling(a: DeploymentAutoscaling): string {
  const s = (d: DeploymentAutoscaling["upscaleDelay"]) => formatSeconds(seconds(d));
  const zero = a.minReplicas === 0 ? `, to zero after ${s(a.scaleToZeroAfter)} idle` : "";
  return (
    `${a.minReplicas} to ${a.maxReplicas} replicas, target ${a.targetInFlight} in flight per replica` +
    `${zero} (up after ${s(a.upscaleDelay)}, down after ${s(a.downscaleDelay)}; cold start timeout ${s(a.coldStartTimeout)}` +
    `${a.priority !== 0 ? `; priority ${a.priority}` : ""})`
  );
}

function formatSeconds(total: number): string {
  if (total < 120) return `${Math.round(total * 10) / 10}s`;
  if (total < 7200) return `${Math.round(total / 60)}m`;
  return `${Math.round(total / 3600)}h`;
}

/** The autoscaling flags, shared by create and autoscale. */
const autoscaleOptions = {
  min: valueOption("N", "the fewest replicas, 0 to 64 (0: scale to zero when idle)"),
  max: valueOption("N", "the most replicas, 1 to 64"),
  "target-in-flight": valueOption("N", "requests in flight plus held per replica to aim at (default: --max-in-flight)"),
  "scale-to-zero-after": valueOption("DURATION", "with --min 0: no request for this long scales to zero (default 15m)"),
  "upscale-delay": valueOption("DURATION", "how long the load stays above the target before replicas are added (default 30s)"),
  "downscale-delay": valueOption("DURATION", "how long it stays below before replicas are removed (default 10m)"),
  "cold-start-timeout": valueOption("DURATION", "the longest a request waits for a replica to load (default 2m)"),
  priority: valueOption("N", "eviction order, -1000 to 1000: idle replicas of lower priority make room first (default 0)"),
};

/** --priority: a whole number from -1000 to 1000, negative ones too; 0 when not given. */
function priorityOf(text: unknown): number {
  if (typeof text !== "string") return 0;
  if (!/^-?\d{1,4}$/.test(text.trim()) || Math.abs(Number(text)) > 1000) {
    throw new UsageError(`--priority expects a whole number from -1000 to 1000, got "${text}"`);
  }
  return Number(text);
}

/** The autoscaling the flags ask for; undefined when none of them was given. */
function autoscalingOf(values: Parameters<Command["run"]>[1]): MessageInitShape<typeof DeploymentAutoscalingSchema> | undefined {
  if (!Object.keys(autoscaleOptions).some((k) => values[k] !== undefined)) return undefined;
  if (values.max === undefined) throw new UsageError("--max is required with autoscaling");
  return {
    minReplicas: intOption(values, "min", 0, 64, 0),
    maxReplicas: intOption(values, "max", 1, 64, 1),
    targetInFlight: intOption(values, "target-in-flight", 1, 1024, 0),
    scaleToZeroAfter: durationOption(values, "scale-to-zero-after"),
    upscaleDelay: durationOption(values, "upscale-delay"),
    downscaleDelay: durationOption(values, "downscale-delay"),
    coldStartTimeout: durationOption(values, "cold-start-timeout"),
    priority: priorityOf(values.priority),
  };
}

const createCommand = command("create NAME", "Create a deployment: serve a pushed artifact commit with a runtime profile on a node", {
  options: {
    node: valueOption("NODE_ID", "the node to serve on (or --selector; neither: any node that fits)"),
    selector: repeatableOption("KEY=VALUE", "a label the node must have; repeatable"),
    profile: valueOption("NAME", "runtime profile (see forge runtimes list; required)"),
    repository: valueOption("ORG/NAME", "artifact repository in the store (required)"),
    commit: valueOption("HEX", "artifact commit in the store (required)"),
    "model-file": valueOption("PATH", "the commit's file the runtime loads (default: its single .gguf)"),
    "target-root": valueOption("DIR", "approved root on the node (default: the server's first)"),
    replicas: valueOption("N", "replicas to serve, 0 to 64, each on its own node (default 1)"),
    "max-per-node": valueOption("N", "at most this many replicas on one node, each its own runtime (default 1)"),
    "max-in-flight": valueOption("N", "invokes in flight at once on each replica (default 8)"),
    "invoke-timeout": valueOption("DURATION", "longest invoke (default 60s)"),
    "drain-timeout": valueOption("DURATION", "longest drain (default 30s)"),
    ...autoscaleOptions,
  },
  notes:
    "Push the files first: forge artifacts push DIR --repository ORG/NAME --commit HEX. A commit with several .gguf files needs --model-file; its other files are acquired beside it. With --max (and the other autoscaling flags) the autoscaler chooses the replicas instead of --replicas.",
  async run(ctx, values, positionals) {
    for (const required of ["profile", "repository", "commit"]) {
      if (values[required] === undefined) throw new UsageError(`--${required} is required`);
    }
    const res = await ctx.client().createDeployment({
      name: positionals[0]!,
      nodeId: textOption(values, "node"),
      selector: parseLabels(values.selector as string[] | undefined, "--selector"),
      runtimeProfile: textOption(values, "profile"),
      repository: textOption(values, "repository"),
      commit: textOption(values, "commit"),
      modelFile: textOption(values, "model-file"),
      targetRoot: textOption(values, "target-root"),
      maxInFlight: intOption(values, "max-in-flight", 1, 1024, 0),
      ...(values.replicas !== undefined ? { replicas: intOption(values, "replicas", 0, 64, 1) } : {}),
      maxPerNode: intOption(values, "max-per-node", 1, 64, 0),
      invokeTimeout: durationOption(values, "invoke-timeout"),
      drainTimeout: durationOption(values, "drain-timeout"),
      autoscaling: autoscalingOf(values),
    });
    return printReply(
      ctx,
      CreateDeploymentResponseSchema,
      res,
      ({ deployment: r }) => `Deployment created.\n${describe(ctx, r!)}\nFollow it with: forge deployments get ${r!.deployment!.name}\n`,
    );
  },
});

/** The deployment table. Pure. */
function deploymentTable(all: DeploymentRecord[], now: Date): string {
  return table(
    ["NAME", "STATE", "READY", "DESIRED", "REVISION", "NODES", "PROFILE", "COMMIT", "UPDATED"],
    all.map((r) => [
      r.deployment!.name,
      state(r.deployment!.state),
      `${r.readyReplicas}/${r.desiredReplicas}`,
      desired(r.desired),
      String(r.deployment!.revision),
      [...new Set(r.replicas.map((i) => i.nodeId).filter((n) => n !== ""))].map((n) => n.slice(0, 8)).join(",") || "-",
      r.runtimeProfile,
      r.commit.slice(0, 12),
      formatAge(dateOf(r.deployment!.updatedAt), now),
    ]),
  );
}

const listCommand = pagedListCommand("List deployments by name", {
  schema: ListDeploymentRecordsResponseSchema,
  fetch: (client, page) => client.listDeploymentRecords(page),
  empty: "No deployments.\n",
  table: deploymentTable,
});

const getCommand = command("get NAME", "Show a deployment, its revisions and its state history", {
  async run(ctx, _values, positionals) {
    const res = await ctx.client().getDeployment({ deployment: nameArg(positionals) });
    return printReply(
      ctx,
      GetDeploymentResponseSchema,
      res,
      ({ deployment, events, scalingEvents }) =>
        describe(ctx, deployment!) +
        (events.length > 0
          ? `\nHistory\n${table(
              ["TIME", "REVISION", "REPLICA", "FROM", "TO", "REASON"],
              events.map((e) => [
                formatTime(dateOf(e.time)!),
                String(e.revision),
                String(e.replica),
                e.fromState === DeploymentState.UNSPECIFIED ? "-" : state(e.fromState),
                state(e.toState),
                e.reason || "-",
              ]),
            )}`
          : "") +
        (scalingEvents.length > 0
          ? `\nScaling\n${table(
              ["TIME", "FROM", "TO", "BY", "REASON"],
              scalingEvents.map((e) => [
                formatTime(dateOf(e.time)!),
                String(e.fromReplicas),
                String(e.toReplicas),
                e.actor,
                e.reason || "-",
              ]),
            )}`
          : ""),
    );
  },
});

const revisionCommand = command(
  "revision NAME",
  "Move a deployment to another commit, profile and/or model file; the new revision loads before the old drains",
  {
    options: {
      commit: valueOption("HEX", "the new commit (default: unchanged)"),
      profile: valueOption("NAME", "the new runtime profile (default: unchanged)"),
      "model-file": valueOption("PATH", "the commit's file to load (default: the current one if the commit holds it)"),
    },
    async run(ctx, values, positionals) {
      if (values.commit === undefined && values.profile === undefined && values["model-file"] === undefined) {
        throw new UsageError("give --commit, --profile and/or --model-file");
      }
      const res = await ctx.client().updateDeploymentRevision({
        deployment: nameArg(positionals),
        commit: textOption(values, "commit"),
        runtimeProfile: textOption(values, "profile"),
        modelFile: textOption(values, "model-file"),
      });
      return printReply(ctx, UpdateDeploymentRevisionResponseSchema, res, ({ deployment: r }) => {
        return `Deployment ${r!.deployment!.name} moves to revision ${r!.deployment!.revision}.\n`;
      });
    },
  },
);

const scaleCommand = command(
  "scale NAME",
  "Set how many replicas serve (autoscaling off): new ones are placed and loaded, surplus ones drained",
  {
    options: { replicas: valueOption("N", "replicas to serve, 0 to 64 (required)") },
    notes: "Scaling a drained or unloaded deployment above 0 starts it again.",
    async run(ctx, values, positionals) {
      if (values.replicas === undefined) throw new UsageError("--replicas is required");
      const res = await ctx
        .client()
        .scaleDeployment({ deployment: nameArg(positionals), replicas: intOption(values, "replicas", 0, 64, 1) });
      return printReply(ctx, ScaleDeploymentResponseSchema, res, ({ deployment: r }) => {
        return `Deployment ${r!.deployment!.name} wants ${r!.desiredReplicas} replicas (${r!.readyReplicas} ready): ${state(r!.deployment!.state)}.\n`;
      });
    },
  },
);

const autoscaleCommand = command("autoscale NAME", "Let the load choose the replicas, between --min and --max", {
  options: autoscaleOptions,
  notes:
    "The autoscaler aims at --target-in-flight requests in flight per replica, averaged over 30 s. With --min 0 an idle deployment goes to zero and the next request waits while a replica loads. forge deployments scale turns it off.",
  async run(ctx, values, positionals) {
    const autoscaling = autoscalingOf(values);
    if (autoscaling === undefined) throw new UsageError("--max is required");
    const res = await ctx.client().updateDeploymentScaling({ deployment: nameArg(positionals), autoscaling });
    return printReply(ctx, UpdateDeploymentScalingResponseSchema, res, ({ deployment: r }) => {
      return `Deployment ${r!.deployment!.name} autoscales: ${describeAutoscaling(r!.autoscaling!)}. It wants ${r!.desiredReplicas} now.\n`;
    });
  },
});

const startCommand = command("start NAME", "Serve a drained, unloaded or failed deployment again", {
  async run(ctx, _values, positionals) {
    const res = await ctx.client().startDeployment({ deployment: nameArg(positionals) });
    return printReply(ctx, StartDeploymentResponseSchema, res, ({ deployment: r }) => {
      return `Deployment ${r!.deployment!.name} is starting with ${r!.desiredReplicas} replicas: ${state(r!.deployment!.state)}.\n`;
    });
  },
});

function desiredCommand(name: "drain" | "unload" | "delete", summary: string): Command {
  return {
    name,
    summary,
    args: "NAME",
    positionals: { min: 1, max: 1 },
    async run(ctx, _values, positionals) {
      const deployment = nameArg(positionals);
      const client = ctx.client();
      const res =
        name === "drain"
          ? await client.drainDeployment({ deployment })
          : name === "unload"
            ? await client.unloadDeployment({ deployment })
            : await client.deleteDeployment({ deployment });
      const schema = {
        drain: DrainDeploymentResponseSchema,
        unload: UnloadDeploymentResponseSchema,
        delete: DeleteDeploymentResponseSchema,
      }[name];
      return printReply(ctx, schema, res as never, () => {
        const d = res.deployment!.deployment!;
        return `Deployment ${d.name} is ${state(d.state)}, wanted ${desired(res.deployment!.desired)}.\n`;
      });
    },
  };
}

const healthCommand = command("health NAME", "Ask the node for the layered health of each loaded revision", {
  options: { wait: valueOption("DURATION", "how long to wait for the node (default 10s, at most 60s)") },
  async run(ctx, values, positionals) {
    const wait = durationOption(values, "wait");
    const res = await ctx.client().checkDeploymentHealth({ deployment: nameArg(positionals), wait });
    printList(ctx, CheckDeploymentHealthResponseSchema, res, {
      items: res.revisions,
      empty: "No revision is loaded.\n",
      table: (revisions) =>
        table(
          ["REVISION", "NODE", "HEALTH", "DETAIL"],
          revisions.map((r) => [
            String(r.revision),
            r.nodeId,
            !r.answered ? "no answer" : r.healthy ? "healthy" : "unhealthy",
            r.detail || "-",
          ]),
        ),
    });
    return ctx.json || res.revisions.every((r) => r.healthy) ? 0 : 1;
  },
});

export const deploymentsGroup: Group = {
  name: "deployments",
  summary: "Deployments: models served by nodes",
  topic: "deployments and their logs",
  commands: [
    createCommand,
    listCommand,
    getCommand,
    revisionCommand,
    scaleCommand,
    autoscaleCommand,
    startCommand,
    healthCommand,
    desiredCommand("drain", "Stop new invokes now, let in-flight ones finish, then unload"),
    desiredCommand("unload", "Stop the deployment's runtimes now"),
    desiredCommand("delete", "Unload the deployment and remove it"),
  ],
};
