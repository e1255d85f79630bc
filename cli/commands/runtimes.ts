// forge runtimes create | list
import {
  CreateRuntimeProfileResponseSchema,
  ListRuntimeProfilesResponseSchema,
  type RuntimeProfile,
} from "../../gen/proto/modelforge/admin/v1/admin_pb.js";
import { EngineKind } from "../../gen/proto/modelforge/jobs/v1/jobs_pb.js";
import { command, intOption, UsageError, valueOption, type Group } from "../args.js";
import { dateOf, fields, formatAge, formatBytes, table } from "../format.js";
import { printReply } from "../output.js";
import { pagedListCommand } from "../list.js";

const engines: Record<string, EngineKind> = { "llama.cpp": EngineKind.LLAMA_CPP, "openai-http": EngineKind.OPENAI_HTTP };
const engineLabel = (kind: EngineKind | undefined) => Object.entries(engines).find(([, k]) => k === kind)?.[0] ?? "unknown";

const createCommand = command("create NAME", "Create an immutable runtime profile (engine and parameters) that jobs and deployments name", {
  options: {
    engine: valueOption("ENGINE", "llama.cpp or openai-http (required)"),
    "context-size": valueOption("TOKENS", "context size in tokens (default: the engine's)"),
    threads: valueOption("N", "CPU threads (default: the engine's)"),
    "memory-bytes": valueOption("BYTES", "openai-http only: RAM its server takes on the node, for placement (default 0)"),
  },
  notes: "A profile never changes: to run with other parameters, create a profile under a new name.",
  async run(ctx, values, positionals) {
    const engineText = values.engine as string | undefined;
    if (engineText === undefined) throw new UsageError("--engine is required: llama.cpp or openai-http");
    const engine = engines[engineText];
    if (engine === undefined) throw new UsageError(`--engine: "${engineText}" is not an engine; use llama.cpp or openai-http`);
    const res = await ctx.client().createRuntimeProfile({
      name: positionals[0]!,
      engine,
      // 0 (unset) means the engine's default; the server holds the real bounds.
      contextSize: intOption(values, "context-size", 1, 1_048_576, 0),
      threads: intOption(values, "threads", 1, 1024, 0),
      memoryBytes: BigInt(intOption(values, "memory-bytes", 1, 2 ** 50, 0)),
    });
    return printReply(ctx, CreateRuntimeProfileResponseSchema, res, ({ profile, created }) => {
      const spec = profile!.spec;
      return (
        `Runtime profile ${profile!.name} ${created ? "created" : "already exists with this content"}.\n` +
        fields([
          ["Engine", engineLabel(spec?.engine)],
          ["Context size", spec?.contextSize ? String(spec.contextSize) : "engine default"],
          ["Threads", spec?.threads ? String(spec.threads) : "engine default"],
          ["Memory", spec?.memoryBytes ? formatBytes(spec.memoryBytes) : "none declared"],
          ["Content hash", spec?.contentHash],
        ])
      );
    });
  },
});

/** The profile table. Pure. */
function profileTable(profiles: RuntimeProfile[], now: Date): string {
  return table(
    ["NAME", "ENGINE", "CONTEXT", "THREADS", "HASH", "CREATED"],
    profiles.map((p) => [
      p.name,
      engineLabel(p.spec?.engine),
      p.spec?.contextSize ? String(p.spec.contextSize) : "default",
      p.spec?.threads ? String(p.spec.threads) : "default",
      (p.spec?.contentHash ?? "").slice(0, 12),
      formatAge(dateOf(p.createdAt), now),
    ]),
  );
}

const listCommand = pagedListCommand("List runtime profiles by name", {
  schema: ListRuntimeProfilesResponseSchema,
  fetch: (client, page) => client.listRuntimeProfiles(page),
  empty: "No runtime profiles. Create one with: forge runtimes create NAME --engine llama.cpp\n",
  table: profileTable,
});

export const runtimesGroup: Group = {
  name: "runtimes",
  summary: "Runtime profiles: which engine runs a model, with which parameters",
  topic: "runtime profiles",
  commands: [createCommand, listCommand],
};
