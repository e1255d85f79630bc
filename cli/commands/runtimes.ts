// forge runtimes create | list
import {
  CreateRuntimeProfileResponseSchema,
  ListRuntimeProfilesResponseSchema,
  type RuntimeProfile,
} from "../../gen/proto/modelforge/admin/v1/admin_pb.js";
import { EngineKind } from "../../gen/proto/modelforge/jobs/v1/jobs_pb.js";
import { command, intOption, switchOption, UsageError, valueOption, type Group } from "../args.js";
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
    "gpu-layers": valueOption("N|all", "llama.cpp only: layers to offload to the GPUs (default 0: the CPU)"),
    "gpu-count": valueOption("N", "GPUs each replica is assigned (default 0)"),
    "gpu-memory-bytes": valueOption("BYTES", "openai-http only: device memory its server takes on each GPU (default 0)"),
    "gpu-shared": switchOption("replicas may share a GPU with others that allow it (default: GPUs of their own)"),
    parallel: valueOption("N", "llama.cpp only: requests each replica generates at once (default: chosen from the model, 1 to 8)"),
    "batch-size": valueOption("TOKENS", "llama.cpp only: tokens per decode batch (default: the engine's)"),
    embeddings: switchOption("llama.cpp only: serve /v1/embeddings too (costs generation about a quarter of its speed)"),
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
      ...(values["gpu-layers"] === "all" ? { gpuLayersAll: true } : { gpuLayers: intOption(values, "gpu-layers", 0, 1024, 0) }),
      gpuCount: intOption(values, "gpu-count", 0, 64, 0),
      gpuMemoryBytes: BigInt(intOption(values, "gpu-memory-bytes", 1, 2 ** 50, 0)),
      gpuShared: values["gpu-shared"] === true,
      parallel: intOption(values, "parallel", 1, 256, 0),
      batchSize: intOption(values, "batch-size", 1, 65_536, 0),
      embeddings: values.embeddings === true,
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
          ["GPUs", gpuSummary(spec)],
          ...(spec?.engine === EngineKind.LLAMA_CPP
            ? ([
                ["Parallel", spec.parallel ? String(spec.parallel) : "chosen from the model"],
                ["Batch size", spec.batchSize ? String(spec.batchSize) : "engine default"],
                ["Embeddings", spec.embeddings ? "served" : "not served"],
              ] as [string, string][])
            : []),
          ["Content hash", spec?.contentHash],
        ])
      );
    });
  },
});

/** "none (CPU)", or "2, all layers, 8.0 GiB each, shared". Pure. */
function gpuSummary(spec: RuntimeProfile["spec"]): string {
  if (!spec?.gpuCount) return "none (CPU)";
  const parts = [String(spec.gpuCount)];
  if (spec.gpuLayersAll) parts.push("all layers");
  else if (spec.gpuLayers > 0) parts.push(`${spec.gpuLayers} layers`);
  if (spec.gpuMemoryBytes > 0n) parts.push(`${formatBytes(spec.gpuMemoryBytes)} each`);
  if (spec.gpuShared) parts.push("shared");
  return parts.join(", ");
}

/** The profile table. Pure. */
function profileTable(profiles: RuntimeProfile[], now: Date): string {
  return table(
    ["NAME", "ENGINE", "CONTEXT", "THREADS", "PARALLEL", "GPUS", "HASH", "CREATED"],
    profiles.map((p) => [
      p.name,
      engineLabel(p.spec?.engine),
      p.spec?.contextSize ? String(p.spec.contextSize) : "default",
      p.spec?.threads ? String(p.spec.threads) : "default",
      p.spec?.engine !== EngineKind.LLAMA_CPP ? "-" : p.spec.parallel ? String(p.spec.parallel) : "auto",
      p.spec?.gpuCount ? String(p.spec.gpuCount) : "-",
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
