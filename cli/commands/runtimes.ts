// forge runtimes create | list
import { create } from "@bufbuild/protobuf";
import {
  CreateRuntimeProfileResponseSchema,
  ListRuntimeProfilesResponseSchema,
  type RuntimeProfile,
} from "../../gen/proto/modelforge/admin/v1/admin_pb.js";
import { EngineKind } from "../../gen/proto/modelforge/jobs/v1/jobs_pb.js";
import { parseIntFlag, UsageError, type Command, type Group } from "../args.js";
import { dateOf, fields, formatAge, table } from "../format.js";
import { printJson } from "../output.js";

const engines: Record<string, EngineKind> = { "llama.cpp": EngineKind.LLAMA_CPP, "openai-http": EngineKind.OPENAI_HTTP };
const engineLabel = (kind: EngineKind | undefined) => Object.entries(engines).find(([, k]) => k === kind)?.[0] ?? "unknown";

/** An optional count; 0 (unset) means the engine's default. The server holds the real bounds. */
function countOption(values: Record<string, unknown>, name: string, max: number): number {
  const text = values[name] as string | undefined;
  return text === undefined ? 0 : parseIntFlag(text, `--${name}`, 1, max);
}

const createCommand: Command = {
  name: "create",
  summary: "Create an immutable runtime profile (engine and parameters) that jobs and deployments name",
  args: "NAME",
  positionals: { min: 1, max: 1 },
  options: {
    engine: { type: "string", value: "ENGINE", description: "llama.cpp or openai-http (required)" },
    "context-size": { type: "string", value: "TOKENS", description: "context size in tokens (default: the engine's)" },
    threads: { type: "string", value: "N", description: "CPU threads (default: the engine's)" },
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
      contextSize: countOption(values, "context-size", 1_048_576),
      threads: countOption(values, "threads", 1024),
    });
    if (ctx.json) {
      printJson(ctx, CreateRuntimeProfileResponseSchema, res);
      return 0;
    }
    const p = res.profile!;
    ctx.out(
      `Runtime profile ${p.name} ${res.created ? "created" : "already exists with this content"}.\n` +
        fields([
          ["Engine", engineLabel(p.spec?.engine)],
          ["Context size", p.spec?.contextSize ? String(p.spec.contextSize) : "engine default"],
          ["Threads", p.spec?.threads ? String(p.spec.threads) : "engine default"],
          ["Content hash", p.spec?.contentHash],
        ]),
    );
    return 0;
  },
};

const listCommand: Command = {
  name: "list",
  summary: "List runtime profiles by name",
  positionals: { min: 0, max: 0 },
  async run(ctx) {
    const profiles: RuntimeProfile[] = [];
    let pageToken = "";
    do {
      const page = await ctx.client().listRuntimeProfiles({ pageSize: 1000, pageToken });
      profiles.push(...page.profiles);
      pageToken = page.nextPageToken;
    } while (pageToken !== "");
    if (ctx.json) {
      printJson(ctx, ListRuntimeProfilesResponseSchema, create(ListRuntimeProfilesResponseSchema, { profiles }));
      return 0;
    }
    if (profiles.length === 0) {
      ctx.out("No runtime profiles. Create one with: forge runtimes create NAME --engine llama.cpp\n");
      return 0;
    }
    const now = ctx.now();
    ctx.out(
      table(
        ["NAME", "ENGINE", "CONTEXT", "THREADS", "HASH", "CREATED"],
        profiles.map((p) => [
          p.name,
          engineLabel(p.spec?.engine),
          p.spec?.contextSize ? String(p.spec.contextSize) : "default",
          p.spec?.threads ? String(p.spec.threads) : "default",
          (p.spec?.contentHash ?? "").slice(0, 12),
          formatAge(dateOf(p.createdAt), now),
        ]),
      ),
    );
    return 0;
  },
};

export const runtimesGroup: Group = {
  name: "runtimes",
  summary: "Runtime profiles: which engine runs a model, with which parameters",
  commands: [createCommand, listCommand],
};
