// forge deployments create | list | get | revision | drain | unload | delete
import { create } from "@bufbuild/protobuf";
import { durationFromMs } from "@bufbuild/protobuf/wkt";
import {
  CheckDeploymentHealthResponseSchema,
  CreateDeploymentResponseSchema,
  DeleteDeploymentResponseSchema,
  DeploymentDesiredState,
  DrainDeploymentResponseSchema,
  GetDeploymentResponseSchema,
  ListDeploymentRecordsResponseSchema,
  UnloadDeploymentResponseSchema,
  UpdateDeploymentRevisionResponseSchema,
  type DeploymentRecord,
} from "../../gen/proto/modelforge/admin/v1/admin_pb.js";
import { DeploymentState } from "../../gen/proto/modelforge/deployment/v1/deployment_pb.js";
import {
  idArg,
  parseDurationFlag,
  parseIntFlag,
  parseLabels,
  textOption,
  UsageError,
  type Command,
  type Context,
  type Group,
} from "../args.js";
import { dateOf, enumName, fields, formatAge, formatLabels, formatTime, table } from "../format.js";
import { printJson } from "../output.js";

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
      ["Node", d.nodeId],
      ["Selector", Object.keys(r.selector).length > 0 ? formatLabels(r.selector) : undefined],
      ["Profile", r.runtimeProfile],
      ["Artifact", `${r.repository}@${r.commit}`],
      ["Target root", r.targetRoot],
      ["In flight", `at most ${r.maxInFlight}`],
      ["Failure", d.failureReason || undefined],
      ["Updated", formatAge(dateOf(d.updatedAt), now)],
    ]) +
    (r.instances.length > 0
      ? `\nRevisions\n${table(
          ["REVISION", "STATE", "STEP", "PROFILE", "COMMIT", "RUNTIME", "REASON"],
          r.instances.map((i) => [
            String(i.revision),
            state(i.state),
            i.step || "-",
            i.runtimeProfile,
            i.commit.slice(0, 12),
            i.runtimeId || "-",
            i.reason || "-",
          ]),
        )}`
      : "")
  );
}

const nameArg = (positionals: string[]) => idArg(positionals, "deployment name or id");

const createCommand: Command = {
  name: "create",
  summary: "Create a deployment: serve a pushed artifact commit with a runtime profile on a node",
  args: "NAME",
  positionals: { min: 1, max: 1 },
  options: {
    node: { type: "string", value: "NODE_ID", description: "the node to serve on (or --selector)" },
    selector: { type: "string", multiple: true, value: "KEY=VALUE", description: "a label the node must have; repeatable" },
    profile: { type: "string", value: "NAME", description: "runtime profile (see forge runtimes list; required)" },
    repository: { type: "string", value: "ORG/NAME", description: "artifact repository in the store (required)" },
    commit: { type: "string", value: "HEX", description: "artifact commit in the store (required)" },
    "target-root": { type: "string", value: "DIR", description: "approved root on the node (default: the server's first)" },
    "max-in-flight": { type: "string", value: "N", description: "invokes in flight at once (default 8)" },
    "invoke-timeout": { type: "string", value: "DURATION", description: "longest invoke (default 60s)" },
    "drain-timeout": { type: "string", value: "DURATION", description: "longest drain (default 30s)" },
  },
  notes: "Push the files first: forge artifacts push DIR --repository ORG/NAME --commit HEX.",
  async run(ctx, values, positionals) {
    for (const required of ["profile", "repository", "commit"]) {
      if (values[required] === undefined) throw new UsageError(`--${required} is required`);
    }
    const timeout = (flag: string) =>
      values[flag] === undefined ? undefined : durationFromMs(parseDurationFlag(values[flag] as string, `--${flag}`));
    const res = await ctx.client().createDeployment({
      name: positionals[0]!,
      nodeId: textOption(values, "node"),
      selector: parseLabels(values.selector as string[] | undefined, "--selector"),
      runtimeProfile: textOption(values, "profile"),
      repository: textOption(values, "repository"),
      commit: textOption(values, "commit"),
      targetRoot: textOption(values, "target-root"),
      maxInFlight: values["max-in-flight"] === undefined ? 0 : parseIntFlag(values["max-in-flight"] as string, "--max-in-flight", 1, 1024),
      invokeTimeout: timeout("invoke-timeout"),
      drainTimeout: timeout("drain-timeout"),
    });
    if (ctx.json) {
      printJson(ctx, CreateDeploymentResponseSchema, res);
      return 0;
    }
    ctx.out(
      `Deployment created.\n${describe(ctx, res.deployment!)}\nFollow it with: forge deployments get ${res.deployment!.deployment!.name}\n`,
    );
    return 0;
  },
};

const listCommand: Command = {
  name: "list",
  summary: "List deployments by name",
  positionals: { min: 0, max: 0 },
  async run(ctx) {
    const all: DeploymentRecord[] = [];
    let pageToken = "";
    do {
      const page = await ctx.client().listDeploymentRecords({ pageSize: 1000, pageToken });
      all.push(...page.deployments);
      pageToken = page.nextPageToken;
    } while (pageToken !== "");
    if (ctx.json) {
      printJson(ctx, ListDeploymentRecordsResponseSchema, create(ListDeploymentRecordsResponseSchema, { deployments: all }));
      return 0;
    }
    if (all.length === 0) {
      ctx.out("No deployments.\n");
      return 0;
    }
    const now = ctx.now();
    ctx.out(
      table(
        ["NAME", "STATE", "DESIRED", "REVISION", "NODE", "PROFILE", "COMMIT", "UPDATED"],
        all.map((r) => [
          r.deployment!.name,
          state(r.deployment!.state),
          desired(r.desired),
          String(r.deployment!.revision),
          r.deployment!.nodeId,
          r.runtimeProfile,
          r.commit.slice(0, 12),
          formatAge(dateOf(r.deployment!.updatedAt), now),
        ]),
      ),
    );
    return 0;
  },
};

const getCommand: Command = {
  name: "get",
  summary: "Show a deployment, its revisions and its state history",
  args: "NAME",
  positionals: { min: 1, max: 1 },
  async run(ctx, _values, positionals) {
    const res = await ctx.client().getDeployment({ deployment: nameArg(positionals) });
    if (ctx.json) {
      printJson(ctx, GetDeploymentResponseSchema, res);
      return 0;
    }
    ctx.out(
      describe(ctx, res.deployment!) +
        (res.events.length > 0
          ? `\nHistory\n${table(
              ["TIME", "REVISION", "FROM", "TO", "REASON"],
              res.events.map((e) => [
                formatTime(dateOf(e.time)!),
                String(e.revision),
                e.fromState === DeploymentState.UNSPECIFIED ? "-" : state(e.fromState),
                state(e.toState),
                e.reason || "-",
              ]),
            )}`
          : ""),
    );
    return 0;
  },
};

const revisionCommand: Command = {
  name: "revision",
  summary: "Move a deployment to another commit and/or profile; the new revision loads before the old drains",
  args: "NAME",
  positionals: { min: 1, max: 1 },
  options: {
    commit: { type: "string", value: "HEX", description: "the new commit (default: unchanged)" },
    profile: { type: "string", value: "NAME", description: "the new runtime profile (default: unchanged)" },
  },
  async run(ctx, values, positionals) {
    if (values.commit === undefined && values.profile === undefined) throw new UsageError("give --commit and/or --profile");
    const res = await ctx.client().updateDeploymentRevision({
      deployment: nameArg(positionals),
      commit: textOption(values, "commit"),
      runtimeProfile: textOption(values, "profile"),
    });
    if (ctx.json) {
      printJson(ctx, UpdateDeploymentRevisionResponseSchema, res);
      return 0;
    }
    ctx.out(`Deployment ${res.deployment!.deployment!.name} moves to revision ${res.deployment!.deployment!.revision}.\n`);
    return 0;
  },
};

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
      if (ctx.json) {
        const schema = {
          drain: DrainDeploymentResponseSchema,
          unload: UnloadDeploymentResponseSchema,
          delete: DeleteDeploymentResponseSchema,
        }[name];
        printJson(ctx, schema, res as never);
        return 0;
      }
      const d = res.deployment!.deployment!;
      ctx.out(`Deployment ${d.name} is ${state(d.state)}, wanted ${desired(res.deployment!.desired)}.\n`);
      return 0;
    },
  };
}

const healthCommand: Command = {
  name: "health",
  summary: "Ask the node for the layered health of each loaded revision",
  args: "NAME",
  positionals: { min: 1, max: 1 },
  options: { wait: { type: "string", value: "DURATION", description: "how long to wait for the node (default 10s, at most 60s)" } },
  async run(ctx, values, positionals) {
    const wait = values.wait === undefined ? undefined : durationFromMs(parseDurationFlag(values.wait as string, "--wait"));
    const res = await ctx.client().checkDeploymentHealth({ deployment: nameArg(positionals), wait });
    if (ctx.json) {
      printJson(ctx, CheckDeploymentHealthResponseSchema, res);
      return 0;
    }
    if (res.revisions.length === 0) {
      ctx.out("No revision is loaded.\n");
      return 0;
    }
    ctx.out(
      table(
        ["REVISION", "NODE", "HEALTH", "DETAIL"],
        res.revisions.map((r) => [
          String(r.revision),
          r.nodeId,
          !r.answered ? "no answer" : r.healthy ? "healthy" : "unhealthy",
          r.detail || "-",
        ]),
      ),
    );
    return res.revisions.every((r) => r.healthy) ? 0 : 1;
  },
};

export const deploymentsGroup: Group = {
  name: "deployments",
  summary: "Deployments: models served by nodes",
  commands: [
    createCommand,
    listCommand,
    getCommand,
    revisionCommand,
    healthCommand,
    desiredCommand("drain", "Stop new invokes now, let in-flight ones finish, then unload"),
    desiredCommand("unload", "Stop the deployment's runtimes now"),
    desiredCommand("delete", "Unload the deployment and remove it"),
  ],
};
