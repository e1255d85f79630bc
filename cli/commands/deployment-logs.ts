// forge deployments logs NAME [-f]: a deployment runtime's stdout and stderr, from the node's tail,
// then (with -f) live until Ctrl-C.
import { Code, ConnectError } from "@connectrpc/connect";
import { LogStream } from "../../gen/proto/modelforge/deployment/v1/deployment_pb.js";
import { WatchDeploymentLogsResponseSchema } from "../../gen/proto/modelforge/admin/v1/admin_pb.js";
import { idArg, textOption, UsageError, type Command } from "../args.js";
import { clean, dateOf } from "../format.js";
import { printJsonLine } from "../output.js";

/** Without -f: how long to wait for the tail before ending. */
const tailWaitMs = 2_000;

export const deploymentLogsCommand: Command = {
  name: "logs",
  summary: "Show a deployment runtime's output; -f follows it live",
  args: "DEPLOYMENT",
  positionals: { min: 1, max: 1 },
  interruptible: true,
  options: {
    follow: { type: "boolean", short: "f", description: "keep following new lines until Ctrl-C" },
    tail: { type: "string", value: "N", description: "recent lines to show first (default 100, at most 1000)" },
    node: { type: "string", value: "NODE_ID", description: "only this node's runtime" },
  },
  async run(ctx, values, positionals) {
    const deploymentId = idArg(positionals, "deployment");
    const tailText = textOption(values, "tail");
    const tailLines = tailText === "" ? 0 : Number(tailText);
    if (!Number.isInteger(tailLines) || tailLines < 0 || tailLines > 1000) throw new UsageError("--tail expects a number from 0 to 1000");
    const stop = new AbortController();
    const onInterrupt = () => stop.abort();
    ctx.signal.addEventListener("abort", onInterrupt, { once: true });
    const timer = values.follow === true ? undefined : setTimeout(() => stop.abort(), tailWaitMs);
    try {
      for await (const batch of ctx
        .client()
        .watchDeploymentLogs({ deploymentId, tailLines, nodeId: textOption(values, "node") }, { signal: stop.signal })) {
        if (ctx.json) {
          printJsonLine(ctx, WatchDeploymentLogsResponseSchema, batch);
          continue;
        }
        for (const line of batch.lines) {
          const at = dateOf(line.observedAt)?.toISOString() ?? "";
          const stream = line.stream === LogStream.STDERR ? "err" : "out";
          ctx.out(`${at} ${stream} r${line.revision} ${clean(line.text)}\n`);
        }
        if (batch.droppedLines > 0n) ctx.err(`(${batch.droppedLines} lines dropped by the node's rate limit)\n`);
      }
    } catch (err) {
      if (!(stop.signal.aborted && ConnectError.from(err).code === Code.Canceled)) throw err;
    } finally {
      clearTimeout(timer);
      ctx.signal.removeEventListener("abort", onInterrupt);
    }
    return 0;
  },
};
