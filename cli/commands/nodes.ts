// forge nodes list | get | watch | register | label | disable | enable | rotate | revoke | decommission
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
  UpdateNodeResponseSchema,
  WatchNodesResponseSchema,
} from "../../gen/proto/modelforge/admin/v1/admin_pb.js";
import { Liveness } from "../../gen/proto/modelforge/common/v1/common_pb.js";
import {
  command,
  durationOption,
  idArg,
  parseLabels,
  parseLiveness,
  repeatableOption,
  requiredOption,
  switchOption,
  textOption,
  UsageError,
  validEnumNames,
  valueOption,
  type Command,
  type Group,
  type OptionDef,
} from "../args.js";
import { confirmByTyping } from "../confirm.js";
import { clean, dateOf, enumName, formatAge, formatLabels, formatTime, formatTimeAndAge, shownOnce } from "../format.js";
import { printJson, printJsonLine, printReply } from "../output.js";
import { pagedListCommand } from "../list.js";
import { nodeLabel, renderDecommission, renderNodeDetail, renderNodeTable, renderPreview } from "./nodes-render.js";

const filterOptions: Record<string, OptionDef> = {
  liveness: valueOption("STATES", `only these liveness states, comma-separated: ${validEnumNames(Liveness).join(",")}`),
  label: repeatableOption("KEY=VALUE", "only nodes with this label; repeatable (all must match)"),
};

const listCommand = pagedListCommand("List nodes with their liveness, GPUs and last heartbeat", {
  options: filterOptions,
  filter: (values) => ({
    liveness: parseLiveness(values.liveness as string | undefined),
    labels: parseLabels(values.label as string[] | undefined),
  }),
  schema: ListNodesResponseSchema,
  fetch: (client, page, filter) => client.listNodes({ ...filter, ...page }),
  empty: ({ liveness, labels }) => (liveness.length > 0 || Object.keys(labels).length > 0 ? "No nodes match.\n" : "No nodes.\n"),
  table: renderNodeTable,
});

const getCommand = command("get ID", "Show one node: facts, host, GPUs, telemetry, stream cursors, credentials", {
  async run(ctx, _values, positionals) {
    const res = await ctx.client().getNode({ nodeId: idArg(positionals, "node ID") });
    return printReply(ctx, GetNodeResponseSchema, res, (node) => renderNodeDetail(node, ctx.now()));
  },
});

const watchCommand = command("watch", "Stream node changes (first every node, then each change) until Ctrl-C", {
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
});

/**
 * A node's labels after `key=value` (set) and `key-` (remove) changes, in order. Pure; a change that
 * is neither is a usage error.
 */
export function changedLabels(current: Readonly<Record<string, string>>, changes: readonly string[]): Record<string, string> {
  const labels = { ...current };
  for (const change of changes) {
    const eq = change.indexOf("=");
    if (eq > 0) labels[change.slice(0, eq)] = change.slice(eq + 1);
    else if (eq < 0 && change.length > 1 && change.endsWith("-")) delete labels[change.slice(0, -1)];
    else throw new UsageError(`expected KEY=VALUE to set a label or KEY- to remove one, got "${change}"`);
  }
  return labels;
}

const labelCommand: Command = {
  name: "label",
  summary: "Set (KEY=VALUE) or remove (KEY-) a node's labels; deployments placed by selector follow",
  args: "ID KEY=VALUE|KEY- ...",
  positionals: { min: 2, max: 65 },
  notes:
    "A replica placed by a selector the node no longer matches is placed again on a node that does; pending replicas the new labels match are placed on it.",
  async run(ctx, _values, positionals) {
    const id = idArg(positionals, "node ID");
    const client = ctx.client();
    const { node } = await client.getNode({ nodeId: id });
    const labels = changedLabels(node?.labels ?? {}, positionals.slice(1));
    const res = await client.updateNode({ nodeId: id, labels, updateMask: { paths: ["labels"] } });
    return printReply(ctx, UpdateNodeResponseSchema, res, ({ node: n }) => {
      const shown = Object.keys(n?.labels ?? {}).length > 0 ? formatLabels(n!.labels) : "(none)";
      return `Node ${clean(nodeLabel(n, id))} has the labels ${clean(shown)}.\n`;
    });
  },
};

const disableCommand = command("disable ID", "Disable a node: its credential is refused until it is enabled", {
  options: { reason: valueOption("TEXT", "why; shown on the node") },
  async run(ctx, values, positionals) {
    const id = idArg(positionals, "node ID");
    const res = await ctx.client().disableNode({ nodeId: id, reason: textOption(values, "reason") });
    return printReply(ctx, DisableNodeResponseSchema, res, ({ node }) => `Node ${clean(nodeLabel(node, id))} is disabled.\n`);
  },
});

const enableCommand = command("enable ID", "Enable a disabled node", {
  async run(ctx, _values, positionals) {
    const id = idArg(positionals, "node ID");
    const res = await ctx.client().enableNode({ nodeId: id });
    return printReply(ctx, EnableNodeResponseSchema, res, ({ node }) => {
      return `Node ${clean(nodeLabel(node, id))} is enabled (liveness ${node ? enumName(Liveness, node.liveness) : "unknown"}).\n`;
    });
  },
});

const rotateCommand = command("rotate ID", "Tell a node to renew its certificate now", {
  options: {
    "revoke-current": switchOption("also revoke the current certificate at once (the node then needs a recovery token)"),
  },
  async run(ctx, values, positionals) {
    const id = idArg(positionals, "node ID");
    const res = await ctx.client().rotateNodeCredential({ nodeId: id, revokeCurrent: values["revoke-current"] === true });
    return printReply(
      ctx,
      RotateNodeCredentialResponseSchema,
      res,
      ({ delivered, revokedSerials }) =>
        `Rotation requested for node ${id}: ` +
        (delivered ? "delivered to its open session now.\n" : "it will be delivered at the node's next call.\n") +
        (revokedSerials.length > 0 ? `Revoked credentials: ${revokedSerials.map(clean).join(", ")}\n` : ""),
    );
  },
});

const revokeCommand = command("revoke ID", "Revoke a node's credential(s), effective immediately", {
  options: {
    serial: valueOption("SERIAL", "revoke only this certificate serial (default: every active one)"),
    reason: valueOption("TEXT", "why"),
  },
  async run(ctx, values, positionals) {
    const id = idArg(positionals, "node ID");
    const res = await ctx.client().revokeNodeCredential({
      nodeId: id,
      serial: textOption(values, "serial"),
      reason: textOption(values, "reason"),
    });
    return printReply(ctx, RevokeNodeCredentialResponseSchema, res, ({ revokedSerials }) =>
      revokedSerials.length === 0
        ? `Node ${id} had no active credential to revoke.\n`
        : `Revoked credential(s) of node ${id}: ${revokedSerials.map(clean).join(", ")}\n`,
    );
  },
});

const decommissionCommand = command(
  "decommission ID",
  "Decommission a node for good: revoke every credential, fail its jobs, reclaim its work",
  {
    options: {
      reason: valueOption("TEXT", "why"),
      yes: switchOption("do it without asking"),
      preview: switchOption("only show what would happen; change nothing"),
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
      return printReply(ctx, DecommissionNodeResponseSchema, res, (done) => renderDecommission(done, id));
    },
  },
);

const registerCommand = command("register", "Pre-register a node (name, labels) and print a one-time join command bound to it", {
  options: {
    name: valueOption("NAME", "the node's name (required)"),
    label: repeatableOption("KEY=VALUE", "a label the node gets; repeatable"),
    ttl: valueOption("DURATION", "how long the token is valid, e.g. 10m, 2h (server default 10m, at most 7d)"),
  },
  notes:
    "The node is pending until an agent enrolls with the token; it then keeps this id, name and labels.\n" +
    "The token is printed once and is stored by the server only as a hash. A new one for the same node:\n" +
    "forge tokens create --node ID.",
  async run(ctx, values) {
    const name = requiredOption(values, "name");
    const ttl = durationOption(values, "ttl");
    const res = await ctx.client().registerNode({ name, labels: parseLabels(values.label as string[] | undefined), ttl });
    return printReply(
      ctx,
      RegisterNodeResponseSchema,
      res,
      ({ node, token, enrollmentToken, joinCommand }) =>
        `Registered node ${clean(node?.id ?? "")} (${clean(name)}), pending until its agent enrolls.\n\n` +
        shownOnce("Enrollment token", token) +
        `Expires: ${formatTimeAndAge(dateOf(enrollmentToken?.expiresAt), ctx.now())}\n` +
        `\nJoin the node by running this on it:\n\n  ${clean(joinCommand)}\n`,
    );
  },
});

export const nodesGroup: Group = {
  name: "nodes",
  summary: "The fleet: inspect, pre-register, label, disable, rotate, revoke and decommission nodes",
  topic: "nodes",
  commands: [
    listCommand,
    getCommand,
    watchCommand,
    registerCommand,
    labelCommand,
    disableCommand,
    enableCommand,
    rotateCommand,
    revokeCommand,
    decommissionCommand,
  ],
};
