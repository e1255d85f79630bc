// forge nodes list | get | watch | register | disable | enable | rotate | revoke | decommission
import { create } from "@bufbuild/protobuf";
import { durationFromMs } from "@bufbuild/protobuf/wkt";
import {
  DecommissionNodeResponseSchema,
  DisableNodeResponseSchema,
  EnableNodeResponseSchema,
  GetNodeResponseSchema,
  ListNodesResponseSchema,
  PreviewDecommissionResponseSchema,
  RegisterNodeResponseSchema,
  RevokeNodeCredentialResponseSchema,
  RotateNodeCredentialResponseSchema,
  WatchNodesResponseSchema,
  type Node,
} from "../../gen/proto/modelforge/admin/v1/admin_pb.js";
import { Liveness } from "../../gen/proto/modelforge/common/v1/common_pb.js";
import {
  idArg,
  parseLabels,
  parseLiveness,
  parseDurationFlag,
  UsageError,
  validEnumNames,
  textOption,
  type Command,
  type Group,
  type OptionDef,
} from "../args.js";
import { confirmByTyping } from "../confirm.js";
import { clean, dateOf, enumName, formatAge, formatTime, formatTimeAndAge } from "../format.js";
import { printJson, printJsonLine } from "../output.js";
import { nodeLabel, renderDecommission, renderNodeDetail, renderNodeTable, renderPreview } from "./nodes-render.js";

const filterOptions: Record<string, OptionDef> = {
  liveness: {
    type: "string",
    value: "STATES",
    description: `only these liveness states, comma-separated: ${validEnumNames(Liveness).join(",")}`,
  },
  label: { type: "string", multiple: true, value: "KEY=VALUE", description: "only nodes with this label; repeatable (all must match)" },
};

const listCommand: Command = {
  name: "list",
  summary: "List nodes with their liveness, GPUs and last heartbeat",
  positionals: { min: 0, max: 0 },
  options: filterOptions,
  async run(ctx, values) {
    const liveness = parseLiveness(values.liveness as string | undefined);
    const labels = parseLabels(values.label as string[] | undefined);
    const nodes: Node[] = [];
    let pageToken = "";
    do {
      const page = await ctx.client().listNodes({ liveness, labels, pageSize: 1000, pageToken });
      nodes.push(...page.nodes);
      pageToken = page.nextPageToken;
    } while (pageToken !== "");
    if (ctx.json) {
      printJson(ctx, ListNodesResponseSchema, create(ListNodesResponseSchema, { nodes }));
    } else if (nodes.length === 0) {
      ctx.out(liveness.length > 0 || Object.keys(labels).length > 0 ? "No nodes match.\n" : "No nodes.\n");
    } else {
      ctx.out(renderNodeTable(nodes, ctx.now()));
    }
    return 0;
  },
};

const getCommand: Command = {
  name: "get",
  summary: "Show one node: facts, host, GPUs, telemetry, stream cursors, credentials",
  args: "ID",
  positionals: { min: 1, max: 1 },
  async run(ctx, _values, positionals) {
    const res = await ctx.client().getNode({ nodeId: idArg(positionals, "node ID") });
    if (ctx.json) printJson(ctx, GetNodeResponseSchema, res);
    else ctx.out(renderNodeDetail(res, ctx.now()));
    return 0;
  },
};

const watchCommand: Command = {
  name: "watch",
  summary: "Stream node changes (first every node, then each change) until Ctrl-C",
  positionals: { min: 0, max: 0 },
  options: filterOptions,
  notes: "With --json, each change is one JSON document on its own line (NDJSON).",
  interruptible: true,
  async run(ctx, values) {
    const liveness = parseLiveness(values.liveness as string | undefined);
    const labels = parseLabels(values.label as string[] | undefined);
    try {
      for await (const res of ctx.client().watchNodes({ liveness, labels }, { signal: ctx.signal, timeoutMs: 0 })) {
        if (ctx.json) {
          printJsonLine(ctx, WatchNodesResponseSchema, res);
          continue;
        }
        const n = res.node;
        if (n === undefined) continue;
        const now = ctx.now();
        ctx.out(
          `${clean(
            [
              formatTime(now),
              n.id,
              n.name || "-",
              enumName(Liveness, n.liveness).padEnd(14),
              `gpus=${n.gpuCount}`,
              (n.connected ? "connected" : "disconnected").padEnd(12),
              `last heartbeat ${formatAge(dateOf(n.lastHeartbeatAt), now)}`,
            ].join("  "),
          )}\n`,
        );
      }
    } catch (err) {
      if (ctx.signal.aborted) return 0;
      throw err;
    }
    if (ctx.signal.aborted) return 0;
    ctx.err("the server ended the watch\n");
    return 1;
  },
};

const disableCommand: Command = {
  name: "disable",
  summary: "Disable a node: its credential is refused until it is enabled",
  args: "ID",
  positionals: { min: 1, max: 1 },
  options: { reason: { type: "string", value: "TEXT", description: "why; shown on the node" } },
  async run(ctx, values, positionals) {
    const id = idArg(positionals, "node ID");
    const res = await ctx.client().disableNode({ nodeId: id, reason: textOption(values, "reason") });
    if (ctx.json) printJson(ctx, DisableNodeResponseSchema, res);
    else ctx.out(`Node ${clean(nodeLabel(res.node, id))} is disabled.\n`);
    return 0;
  },
};

const enableCommand: Command = {
  name: "enable",
  summary: "Enable a disabled node",
  args: "ID",
  positionals: { min: 1, max: 1 },
  async run(ctx, _values, positionals) {
    const id = idArg(positionals, "node ID");
    const res = await ctx.client().enableNode({ nodeId: id });
    if (ctx.json) printJson(ctx, EnableNodeResponseSchema, res);
    else
      ctx.out(
        `Node ${clean(nodeLabel(res.node, id))} is enabled (liveness ${res.node ? enumName(Liveness, res.node.liveness) : "unknown"}).\n`,
      );
    return 0;
  },
};

const rotateCommand: Command = {
  name: "rotate",
  summary: "Tell a node to renew its certificate now",
  args: "ID",
  positionals: { min: 1, max: 1 },
  options: {
    "revoke-current": {
      type: "boolean",
      description: "also revoke the current certificate at once (the node then needs a recovery token)",
    },
  },
  async run(ctx, values, positionals) {
    const id = idArg(positionals, "node ID");
    const res = await ctx.client().rotateNodeCredential({ nodeId: id, revokeCurrent: values["revoke-current"] === true });
    if (ctx.json) {
      printJson(ctx, RotateNodeCredentialResponseSchema, res);
      return 0;
    }
    ctx.out(
      `Rotation requested for node ${id}: ` +
        (res.delivered ? "delivered to its open session now.\n" : "it will be delivered at the node's next call.\n") +
        (res.revokedSerials.length > 0 ? `Revoked credentials: ${res.revokedSerials.map(clean).join(", ")}\n` : ""),
    );
    return 0;
  },
};

const revokeCommand: Command = {
  name: "revoke",
  summary: "Revoke a node's credential(s), effective immediately",
  args: "ID",
  positionals: { min: 1, max: 1 },
  options: {
    serial: { type: "string", value: "SERIAL", description: "revoke only this certificate serial (default: every active one)" },
    reason: { type: "string", value: "TEXT", description: "why" },
  },
  async run(ctx, values, positionals) {
    const id = idArg(positionals, "node ID");
    const res = await ctx.client().revokeNodeCredential({
      nodeId: id,
      serial: textOption(values, "serial"),
      reason: textOption(values, "reason"),
    });
    if (ctx.json) printJson(ctx, RevokeNodeCredentialResponseSchema, res);
    else if (res.revokedSerials.length === 0) ctx.out(`Node ${id} had no active credential to revoke.\n`);
    else ctx.out(`Revoked credential(s) of node ${id}: ${res.revokedSerials.map(clean).join(", ")}\n`);
    return 0;
  },
};

const decommissionCommand: Command = {
  name: "decommission",
  summary: "Decommission a node for good: revoke every credential, fail its jobs, reclaim its work",
  args: "ID",
  positionals: { min: 1, max: 1 },
  options: {
    reason: { type: "string", value: "TEXT", description: "why" },
    yes: { type: "boolean", description: "do it without asking" },
    preview: { type: "boolean", description: "only show what would happen; change nothing" },
  },
  notes:
    "Without --yes the preview is shown and you are asked to type the node id to confirm. Without a\n" +
    "terminal to ask on (and without --yes) the command refuses and exits with status 2.",
  interruptible: true,
  async run(ctx, values, positionals) {
    const id = idArg(positionals, "node ID");
    const yes = values.yes === true;
    const previewOnly = values.preview === true;
    if (yes && previewOnly) throw new UsageError("--yes and --preview exclude each other");
    if (ctx.json && !yes && !previewOnly) {
      throw new UsageError("--json cannot be combined with the confirmation prompt: pass --yes (or --preview)");
    }
    const client = ctx.client();
    if (!yes) {
      const preview = await client.previewDecommission({ nodeId: id });
      if (ctx.json) {
        printJson(ctx, PreviewDecommissionResponseSchema, preview);
        return 0;
      }
      ctx.out(renderPreview(preview, id));
      if (previewOnly) return 0;
      if (!ctx.stdinIsTTY) {
        ctx.err(
          `error: refusing to decommission node ${id} without confirmation: there is no terminal to ask on.\n` +
            "Pass --yes to confirm, or --preview to only preview.\n",
        );
        return 2;
      }
      const target = preview.node?.id || id;
      const ok = await confirmByTyping(
        target,
        `Type the node id (${target}) to confirm decommissioning: `,
        ctx.stdin,
        ctx.stderr,
        ctx.signal,
      );
      if (!ok) {
        ctx.err("Aborted: nothing was changed.\n");
        return 1;
      }
    }
    const res = await client.decommissionNode({ nodeId: id, reason: textOption(values, "reason") });
    if (ctx.json) printJson(ctx, DecommissionNodeResponseSchema, res);
    else ctx.out(renderDecommission(res, id));
    return 0;
  },
};

const registerCommand: Command = {
  name: "register",
  summary: "Pre-register a node (name, labels) and print a one-time join command bound to it",
  positionals: { min: 0, max: 0 },
  options: {
    name: { type: "string", value: "NAME", description: "the node's name (required)" },
    label: { type: "string", multiple: true, value: "KEY=VALUE", description: "a label the node gets; repeatable" },
    ttl: { type: "string", value: "DURATION", description: "how long the token is valid, e.g. 10m, 2h (server default 10m, at most 7d)" },
  },
  notes:
    "The node is pending until an agent enrolls with the token; it then keeps this id, name and labels.\n" +
    "The token is printed once and is stored by the server only as a hash. A new one for the same node:\n" +
    "forge tokens create --node ID.",
  async run(ctx, values) {
    const name = textOption(values, "name");
    if (name === "") throw new UsageError("--name is required");
    const ttl = values.ttl === undefined ? undefined : durationFromMs(parseDurationFlag(values.ttl as string, "--ttl"));
    const res = await ctx.client().registerNode({ name, labels: parseLabels(values.label as string[] | undefined), ttl });
    if (ctx.json) {
      printJson(ctx, RegisterNodeResponseSchema, res);
      return 0;
    }
    ctx.out(
      `Registered node ${clean(res.node?.id ?? "")} (${clean(name)}), pending until its agent enrolls.\n\n` +
        "Enrollment token (shown once; it cannot be retrieved again):\n\n" +
        `  ${clean(res.token)}\n\n` +
        `Expires: ${formatTimeAndAge(dateOf(res.enrollmentToken?.expiresAt), ctx.now())}\n` +
        "\nJoin the node by running this on it:\n\n" +
        `  ${clean(res.joinCommand)}\n`,
    );
    return 0;
  },
};

export const nodesGroup: Group = {
  name: "nodes",
  summary: "The fleet: inspect, pre-register, disable, rotate, revoke and decommission nodes",
  commands: [
    listCommand,
    getCommand,
    watchCommand,
    registerCommand,
    disableCommand,
    enableCommand,
    rotateCommand,
    revokeCommand,
    decommissionCommand,
  ],
};
