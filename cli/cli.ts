// The command tree, help text and dispatch of `forge`. `runCli` does everything but exit, so the
// entry point stays trivial.
import { parseArgs } from "node:util";
import { ConnectError, Code } from "@connectrpc/connect";
import { codeName } from "../common/codes.js";
import { UsageError, type Command, type Context, type Group, type OptionDef, type OptionValues } from "./args.js";
import { createAdminClient, defaultCaFile, defaultServer, resolveConfig, resolveServer, type AdminClient } from "./client.js";
import { clean } from "./format.js";
import { tokensGroup } from "./commands/tokens.js";
import { nodesGroup } from "./commands/nodes.js";
import { auditGroup } from "./commands/audit.js";
import { jobsGroup } from "./commands/jobs.js";
import { artifactsGroup } from "./commands/artifacts.js";
import { agentsGroup } from "./commands/agents-group.js";
import { runtimesGroup } from "./commands/runtimes.js";
import { deploymentsGroup } from "./commands/deployments.js";

import { serviceKeysGroup } from "./commands/service-keys.js";
import { usageGroup } from "./commands/usage.js";
import { deploymentLogsCommand } from "./commands/deployment-logs.js";
import { loginGroup, logoutGroup, whoamiGroup } from "./commands/sign-in.js";
import { usersGroup } from "./commands/users.js";

/** The deployments commands with `logs`, which lives in its own file. */
const deployments: Group = { ...deploymentsGroup, commands: [...deploymentsGroup.commands, deploymentLogsCommand] };

export const groups: Group[] = [
  loginGroup,
  logoutGroup,
  whoamiGroup,
  usersGroup,
  tokensGroup,
  nodesGroup,
  jobsGroup,
  artifactsGroup,
  runtimesGroup,
  deployments,
  serviceKeysGroup,
  usageGroup,
  agentsGroup,
  auditGroup,
];

const globalOptions: Record<string, OptionDef> = {
  server: { type: "string", value: "URL", description: `control plane URL (env MODELFORGE_SERVER; default ${defaultServer})` },
  ca: {
    type: "string",
    value: "FILE",
    description: `CA certificate the server's certificate must chain to (env MODELFORGE_CA_FILE; default ${defaultCaFile})`,
  },
  "admin-key": {
    type: "string",
    value: "KEY",
    description: "operator API key (env MODELFORGE_OPERATOR_API_KEY, preferred: a flag is visible in the process list)",
  },
  json: { type: "boolean", description: "machine output: the response as protobuf JSON" },
  help: { type: "boolean", short: "h", description: "show help; works after any command, e.g. forge nodes get --help" },
};

/** Global flags that take a value, so the scan for command words can skip their values. */
const globalValueFlags = new Set(
  Object.entries(globalOptions)
    .filter(([, o]) => o.type === "string")
    .flatMap(([name, o]) => [`--${name}`, ...(o.short ? [`-${o.short}`] : [])]),
);

export interface Io {
  stdout: NodeJS.WritableStream & { isTTY?: boolean; columns?: number };
  stderr: NodeJS.WritableStream;
  stdin: NodeJS.ReadableStream & { isTTY?: boolean };
  env: NodeJS.ProcessEnv;
  signal: AbortSignal;
  /** Told whether the running command ends cleanly on `signal`; if not, Ctrl-C should just exit. */
  setInterruptible?: (interruptible: boolean) => void;
  now?: () => Date;
}

// ---- help text ----

function optionLines(options: Record<string, OptionDef>): string {
  const rows = Object.entries(options).map(([name, o]) => {
    const flag = `${o.short ? `-${o.short}, ` : ""}--${name}${o.value ? ` ${o.value}` : ""}`;
    return [flag, o.description] as const;
  });
  const width = Math.max(...rows.map(([f]) => f.length));
  return rows.map(([f, d]) => `  ${f.padEnd(width)}  ${d}\n`).join("");
}

const synopsis = (c: Command) => `${c.name}${c.args ? ` ${c.args}` : ""}`;

/** "a, b and c". */
const listing = (items: string[]) => (items.length < 2 ? items.join("") : `${items.slice(0, -1).join(", ")} and ${items.at(-1)}`);

export function mainUsage(): string {
  const rows = groups.flatMap((g) => g.commands.map((c) => [`${g.name} ${synopsis(c)}`, c.summary] as const));
  const width = Math.max(...rows.map(([s]) => s.length));
  return (
    "Usage: forge [global options] <group> <command> [arguments] [options]\n\n" +
    `The ModelForge operator CLI: ${listing(groups.map((g) => g.topic))}.\n\n` +
    "Commands:\n" +
    rows.map(([s, d]) => `  ${s.padEnd(width)}  ${d}\n`).join("") +
    "\nGlobal options:\n" +
    optionLines(globalOptions) +
    '\nRun "forge <group> --help" or "forge <group> <command> --help" for details.\n' +
    'Exit status: 0 success; 1 failure (an API error prints "error: <code>: <message>"); 2 usage error.\n'
  );
}

export function groupUsage(g: Group): string {
  const width = Math.max(...g.commands.map((c) => synopsis(c).length));
  return (
    `Usage: forge ${g.name} <command> [arguments] [options]\n\n` +
    `${g.summary}.\n\n` +
    "Commands:\n" +
    g.commands.map((c) => `  ${synopsis(c).padEnd(width)}  ${c.summary}\n`).join("") +
    `\nRun "forge ${g.name} <command> --help" for a command's options; "forge --help" for global options.\n`
  );
}

export function commandUsage(g: Group, c: Command): string {
  return (
    `Usage: forge ${g.name} ${synopsis(c)}${c.options ? " [options]" : ""}\n\n` +
    `${c.summary}.\n` +
    (c.options ? `\nOptions:\n${optionLines(c.options)}` : "") +
    (c.notes ? `\n${c.notes}\n` : "") +
    "\nGlobal options:\n" +
    optionLines(globalOptions)
  );
}

// ---- dispatch ----

/** The first two words that are neither options nor the values of global options. */
function commandWords(argv: string[]): string[] {
  const words: string[] = [];
  for (let i = 0; i < argv.length && words.length < 2; i++) {
    const a = argv[i]!;
    if (a === "--") break;
    if (a.startsWith("-") && a !== "-") {
      if (globalValueFlags.has(a)) i++;
      continue;
    }
    words.push(a);
  }
  return words;
}

function parseError(err: unknown): UsageError {
  const message = (err as Error).message.split(". ")[0]!.replace(/\.$/, "");
  return new UsageError(message);
}

interface Redactor {
  secrets: string[];
}

function redact(text: string, r: Redactor): string {
  let out = text;
  for (const s of r.secrets) if (s.length > 0) out = out.split(s).join("<redacted>");
  return out.split("\n").map(clean).join("\n");
}

function hintFor(err: ConnectError): string | undefined {
  if (err.code === Code.Unauthenticated) return "sign in again (forge login), or check MODELFORGE_TOKEN / MODELFORGE_OPERATOR_API_KEY";
  if (/certificate|self[- ]signed|altname|CERT_|issuer/i.test(err.rawMessage)) {
    return "the server's certificate was not accepted: check --ca / MODELFORGE_CA_FILE and --server";
  }
  if (err.code === Code.Unavailable && err.cause !== undefined) return "is the control plane running at --server / MODELFORGE_SERVER?";
  return undefined;
}

/** What the command line asks for: help (or the usage, when no command is named), or a command to run. */
type Target = { help: string; code: 0 | 2 } | { group: Group; command: Command; args: string[]; words: number };

/** @throws UsageError for a group or command that does not exist. */
function resolveTarget(argv: string[]): Target {
  const forceHelp = argv[0] === "help";
  const args = forceHelp ? argv.slice(1) : argv;
  const wantsHelp = forceHelp || args.includes("--help") || args.includes("-h");
  // Without a command named, the usage goes to stderr with status 2, unless help was asked for.
  const usage = (text: string): Target => ({ help: text, code: wantsHelp ? 0 : 2 });
  const [groupName, commandName] = commandWords(args);
  if (groupName === undefined) return usage(mainUsage());
  const group = groups.find((g) => g.name === groupName);
  if (group === undefined) throw new UsageError(`unknown command "${groupName}"`);
  const implicit = group.defaultCommand !== undefined && (commandName === undefined || !group.commands.some((c) => c.name === commandName));
  if (commandName === undefined && !implicit) return usage(groupUsage(group));
  const command = group.commands.find((c) => c.name === (implicit ? group.defaultCommand : commandName));
  if (command === undefined) throw new UsageError(`unknown command "${group.name} ${commandName}"`, `forge ${group.name} --help`);
  if (wantsHelp) return { help: commandUsage(group, command), code: 0 };
  return { group, command, args, words: implicit ? 1 : 2 };
}

/** The command's options and arguments (after its command words: the group's, and the command's unless implied). */
function parseCommandLine(command: Command, args: string[], words: number): { values: OptionValues; positionals: string[] } {
  let parsed: ReturnType<typeof parseArgs>;
  try {
    parsed = parseArgs({ args, options: { ...globalOptions, ...(command.options ?? {}) }, allowPositionals: true, strict: true });
  } catch (err) {
    throw parseError(err);
  }
  // Drop the command words (the first positionals, as commandWords found them).
  return { values: parsed.values, positionals: parsed.positionals.slice(words) };
}

function checkArity(command: Command, positionals: string[]): void {
  const range = command.positionals ?? { min: 0, max: Infinity };
  if (positionals.length < range.min) throw new UsageError(`missing ${command.args ?? "argument"}`);
  if (positionals.length > range.max) throw new UsageError(`unexpected argument "${positionals[range.max]}"`);
}

/** What a command runs with; the admin client (and its configuration) is made on first use. */
function contextOf(io: Io, values: OptionValues, out: (s: string) => void, err: (s: string) => void): Context {
  let client: AdminClient | undefined;
  const flags = {
    server: values.server as string | undefined,
    ca: values.ca as string | undefined,
    adminKey: values["admin-key"] as string | undefined,
  };
  return {
    json: values.json === true,
    out,
    err,
    client() {
      client ??= createAdminClient(resolveConfig(flags, io.env));
      return client;
    },
    server: () => resolveServer(flags, io.env),
    env: io.env,
    stdinIsTTY: io.stdin.isTTY === true,
    stdoutIsTTY: io.stdout.isTTY === true,
    columns: io.stdout.columns,
    stdin: io.stdin,
    stderr: io.stderr,
    signal: io.signal,
    now: io.now ?? (() => new Date()),
  };
}

/** Prints what went wrong; the exit status: 2 for a usage error, 1 for everything else. */
function reportError(err: unknown, errOut: (s: string) => void, helpHint: string): number {
  if (err instanceof UsageError) {
    errOut(`error: ${err.message}\n`);
    if (err.name === "UsageError") errOut(`Run "${err.helpHint ?? helpHint}" for usage.\n`);
    return 2;
  }
  if (err instanceof ConnectError) {
    // Unavailable is the one answer that says "safe to retry": say so first, the detail after.
    if (err.code === Code.Unavailable) errOut(`error: control plane unavailable, retry (${err.rawMessage})\n`);
    else errOut(`error: ${codeName(err.code)}: ${err.rawMessage}\n`);
    const hint = hintFor(err);
    if (hint) errOut(`hint: ${hint}\n`);
    return 1;
  }
  errOut(`error: ${err instanceof Error ? err.message : String(err)}\n`);
  return 1;
}

export async function runCli(argv: string[], io: Io): Promise<number> {
  const out = (s: string) => void io.stdout.write(s);
  const redactor: Redactor = { secrets: [] };
  const errOut = (s: string) => void io.stderr.write(redact(s, redactor));
  if (io.env.MODELFORGE_OPERATOR_API_KEY) redactor.secrets.push(io.env.MODELFORGE_OPERATOR_API_KEY);
  if (io.env.MODELFORGE_TOKEN) redactor.secrets.push(io.env.MODELFORGE_TOKEN);

  let helpHint = "forge --help";
  try {
    const target = resolveTarget(argv);
    if ("help" in target) {
      (target.code === 0 ? io.stdout : io.stderr).write(target.help);
      return target.code;
    }
    const { group, command } = target;
    helpHint = `forge ${group.name} ${command.name} --help`;
    const { values, positionals } = parseCommandLine(command, target.args, target.words);
    const adminKeyFlag = values["admin-key"] as string | undefined;
    if (adminKeyFlag !== undefined) {
      redactor.secrets.push(adminKeyFlag);
      errOut("warning: --admin-key is visible to other users in the process list; prefer MODELFORGE_OPERATOR_API_KEY\n");
    }
    checkArity(command, positionals);
    const ctx = contextOf(io, values, out, errOut);
    io.setInterruptible?.(command.interruptible === true);
    return await command.run(ctx, values, positionals);
  } catch (err) {
    return reportError(err, errOut, helpHint);
  }
}
