// Command definitions and argument parsing shared by every command. Parsing is node:util parseArgs
// in strict mode; anything the user got wrong is a UsageError (exit 2).
import { durationFromMs, type Duration } from "@bufbuild/protobuf/wkt";
import { parseDuration } from "../common/duration.js";
import { Liveness } from "../gen/proto/modelforge/common/v1/common_pb.js";
import { JobState } from "../gen/proto/modelforge/admin/v1/admin_pb.js";
import type { AdminClient, ServerConfig } from "./client.js";
import { UsageError } from "./usage-error.js";

export { UsageError };

export interface OptionDef {
  type: "string" | "boolean";
  multiple?: boolean;
  short?: string;
  /** Shown in help, e.g. "NAME". */
  value?: string;
  description: string;
}

export type OptionValues = Record<string, string | boolean | (string | boolean)[] | undefined>;

/** What a command gets to work with. Output goes through `out`/`err` only. */
export interface Context {
  json: boolean;
  out(text: string): void;
  err(text: string): void;
  /** The admin client; resolving the configuration (server, CA, credential) happens on first use. */
  client(): AdminClient;
  /** Where the control plane is, for the commands that sign in and out. */
  server(): ServerConfig;
  env: NodeJS.ProcessEnv;
  stdinIsTTY: boolean;
  stdoutIsTTY: boolean;
  /** The terminal's width, when stdout is one. */
  columns?: number;
  stdin: NodeJS.ReadableStream;
  /** Where prompts go (stderr), so stdout stays clean. */
  stderr: NodeJS.WritableStream;
  /** Aborted on Ctrl-C (SIGINT) or SIGTERM. */
  signal: AbortSignal;
  now(): Date;
}

export interface Command {
  name: string;
  /** One line for the command list. */
  summary: string;
  /** Positional arguments for the synopsis, e.g. "ID". */
  args?: string;
  /** Exact positional count range. */
  positionals?: { min: number; max: number };
  options?: Record<string, OptionDef>;
  /** Extra help text after the options. */
  notes?: string;
  /** The command ends cleanly on Ctrl-C (via ctx.signal); other commands are simply killed. */
  interruptible?: boolean;
  run(ctx: Context, values: OptionValues, positionals: string[]): Promise<number>;
}

export interface Group {
  name: string;
  summary: string;
  /** What the group covers, as it reads in the CLI's one-line description: "runtime profiles". */
  topic: string;
  commands: Command[];
  /** The command `forge <group>` runs when no command is named (else it prints the group's usage). */
  defaultCommand?: string;
}

// ---- definitions ----

/** An option that takes a value, shown in help as `--name VALUE`. */
export const valueOption = (value: string, description: string): OptionDef => ({ type: "string", value, description });
/** An option that takes a value and may be given more than once. */
export const repeatableOption = (value: string, description: string): OptionDef => ({ type: "string", multiple: true, value, description });
/** An option without a value: on or off. */
export const switchOption = (description: string): OptionDef => ({ type: "boolean", description });

type CommandBody = Omit<Command, "name" | "summary" | "args" | "positionals">;

/**
 * A command from its synopsis (its name, then one word for each argument, every one required:
 * "revoke ID"), its one-line summary and the rest of its definition.
 */
export function command(synopsis: string, summary: string, body: CommandBody): Command {
  const [name, ...args] = synopsis.split(" ");
  const positionals = { min: args.length, max: args.length };
  return { name: name!, summary, ...(args.length > 0 ? { args: args.join(" ") } : {}), positionals, ...body };
}

// ---- value parsers (pure) ----

/** k=v pairs into a map; rejects missing "=", empty keys and repeated keys. */
export function parseLabels(pairs: string[] | undefined, flag = "--label"): Record<string, string> {
  const labels: Record<string, string> = {};
  for (const pair of pairs ?? []) {
    const eq = pair.indexOf("=");
    if (eq <= 0) throw new UsageError(`${flag} expects KEY=VALUE, got "${pair}"`);
    const key = pair.slice(0, eq);
    if (Object.hasOwn(labels, key)) throw new UsageError(`${flag} ${key} given more than once`);
    labels[key] = pair.slice(eq + 1);
  }
  return labels;
}

/**
 * A comma-separated list of enum value names ("online,stale") into enum values. Names are the
 * enum's short names, case-insensitive; UNSPECIFIED is not accepted.
 */
export function parseEnumList<E extends number>(text: string | undefined, enumObject: Record<string, string | number>, flag: string): E[] {
  if (text === undefined) return [];
  const names = validEnumNames(enumObject);
  const out: E[] = [];
  for (const raw of text.split(",")) {
    const name = raw.trim().toUpperCase().replace(/-/g, "_");
    if (name === "") continue;
    const value = enumObject[name];
    if (typeof value !== "number" || value === 0) {
      throw new UsageError(`${flag}: unknown value "${raw.trim()}" (one or more of ${names.join(", ")})`);
    }
    if (!out.includes(value as E)) out.push(value as E);
  }
  return out;
}

export function validEnumNames(enumObject: Record<string, string | number>): string[] {
  return Object.entries(enumObject)
    .filter(([, v]) => typeof v === "number" && v !== 0)
    .map(([k]) => k.toLowerCase());
}

export const parseLiveness = (text: string | undefined): Liveness[] => parseEnumList<Liveness>(text, Liveness, "--liveness");
export const parseJobStates = (text: string | undefined): JobState[] => parseEnumList<JobState>(text, JobState, "--state");

/** A duration flag ("10m", "90s") in milliseconds. */
function parseDurationFlag(text: string, flag: string): number {
  try {
    return parseDuration(text);
  } catch (err) {
    throw new UsageError(`${flag}: ${(err as Error).message}`);
  }
}

/** An optional duration option ("10m", "90s"); undefined when it was not given. */
export function durationOption(values: OptionValues, name: string): Duration | undefined {
  const text = values[name];
  return typeof text === "string" ? durationFromMs(parseDurationFlag(text, `--${name}`)) : undefined;
}

/** "--since": a duration back from now ("1h", "30m") or an ISO 8601 time ("2024-05-01T12:00:00Z"). */
export function parseSince(text: string, now: Date): Date {
  const trimmed = text.trim();
  if (/^\d{4}-\d{2}-\d{2}/.test(trimmed)) {
    const ms = Date.parse(trimmed);
    if (Number.isNaN(ms)) throw new UsageError(`--since: "${text}" is not a valid ISO 8601 time`);
    return new Date(ms);
  }
  let ms: number;
  try {
    ms = parseDuration(trimmed);
  } catch {
    throw new UsageError(`--since expects a duration such as 30m or 1h, or an ISO 8601 time, got "${text}"`);
  }
  return new Date(now.getTime() - ms);
}

/** A whole number in [min, max]. */
export function parseIntFlag(text: string, flag: string, min: number, max: number): number {
  if (!/^\d+$/.test(text.trim())) throw new UsageError(`${flag} expects a whole number, got "${text}"`);
  const n = Number(text.trim());
  if (n < min || n > max) throw new UsageError(`${flag} must be between ${min} and ${max}, got ${n}`);
  return n;
}

/** An optional whole-number option in [min, max]; `fallback` when it was not given. */
export function intOption(values: OptionValues, name: string, min: number, max: number, fallback: number): number {
  const text = values[name];
  return typeof text === "string" ? parseIntFlag(text, `--${name}`, min, max) : fallback;
}

/** A string option's value, "" when it was not given (the request fields it fills treat "" as unset). */
export function textOption(values: OptionValues, name: string): string {
  const value = values[name];
  return typeof value === "string" ? value : "";
}

/** A string option that must be given and not be empty. */
export function requiredOption(values: OptionValues, name: string): string {
  const value = textOption(values, name);
  if (value === "") throw new UsageError(`--${name} is required`);
  return value;
}

/** The node or job id argument: non-empty, no whitespace. The server checks the format. */
export function idArg(positionals: string[], what: string): string {
  const id = positionals[0]?.trim() ?? "";
  if (id === "") throw new UsageError(`missing ${what}`);
  return id;
}
