// The `openai-http` engine: an external OpenAI-compatible server (vLLM, llama-server, TGI) started
// from a command template that only the node's operator writes, in the agent's configuration.
// A lease never carries a command: it can only choose the model path and engine parameters,
// which are substituted into the template's argv elements, never through a shell.
import { constants } from "node:fs";
import { access, readFile, stat } from "node:fs/promises";
import { basename, normalize } from "node:path";

/** The operator's template, from the agent configuration. */
export interface OpenAiHttpTemplate {
  /** argv: an absolute executable, then arguments with {placeholders}. */
  command: string[];
  /** Polled until it answers 200 (default /health). */
  healthPath?: string;
  /** Extra environment for the server (the agent's own environment is never inherited). */
  env?: Record<string, string>;
}

export interface TemplateValues {
  model: string;
  port: number;
  host: string;
  contextSize?: number;
  threads?: number;
  /** The assigned GPUs' indices; {gpus} and {gpu_count} have no value without them. */
  gpus?: number[];
}

export class TemplateError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "TemplateError";
  }
}

const placeholder = /\{([a-z_]*)\}/g;

/** Executables that would read an argument as a program: the template must name the server itself. */
const interpreters = new Set(["sh", "bash", "dash", "zsh", "ksh", "mksh", "csh", "tcsh", "fish", "busybox", "env", "sudo", "su", "xargs"]);

/** Checks a template once, when the configuration is read: fail closed on anything unexpected. */
export function validateTemplate(t: OpenAiHttpTemplate): void {
  const [exe, ...args] = t.command;
  if (exe === undefined || !exe.startsWith("/")) throw new TemplateError("the command's executable must be an absolute path");
  if (exe.includes("{")) throw new TemplateError("the executable cannot contain placeholders");
  if (normalize(exe) !== exe) throw new TemplateError("the executable's path must be normalised (no '.', '..' or '//')");
  if (interpreters.has(basename(exe))) throw new TemplateError(`the executable cannot be a shell or launcher (${basename(exe)})`);
  if (t.command.length > MAX_ARGS) throw new TemplateError(`the command has more than ${MAX_ARGS} elements`);
  for (const arg of t.command) {
    if (arg.length > MAX_ARG_CHARS || /[\u0000-\u001f\u007f]/.test(arg))
      throw new TemplateError(`a command element is longer than ${MAX_ARG_CHARS} characters or holds control characters`);
  }
  for (const arg of args) {
    for (const [, name] of arg.matchAll(placeholder)) {
      if (!Object.hasOwn(names, name!)) throw new TemplateError(`unknown placeholder {${name}}`);
    }
    // A brace left over once the known placeholders are out is a typo such as {Model} or {port.
    if (/[{}]/.test(arg.replace(placeholder, ""))) throw new TemplateError(`a stray brace in "${arg}"`);
  }
  if (!args.some((a) => a.includes("{model}"))) throw new TemplateError("the command must take the model path ({model})");
  if (!t.command.some((a) => a.includes("{port}"))) throw new TemplateError("the command must take the port ({port})");
  if (t.healthPath !== undefined && !/^\/[A-Za-z0-9/_.-]*$/.test(t.healthPath))
    throw new TemplateError("healthPath must be a plain absolute path");
  for (const [key, value] of Object.entries(t.env ?? {})) {
    if (!/^[A-Z_][A-Z0-9_]{0,127}$/.test(key)) throw new TemplateError(`env: "${key.slice(0, 40)}" is not a plain variable name`);
    if (typeof value !== "string" || value.length > MAX_ARG_CHARS || value.includes("\0"))
      throw new TemplateError(`env ${key}: the value must be a string of at most ${MAX_ARG_CHARS} characters`);
  }
}

const MAX_ARGS = 128;
const MAX_ARG_CHARS = 4096;
const MAX_CONFIG_BYTES = 64 * 1024;

/**
 * Parses the operator's template file (JSON: `command`, optional `healthPath` and `env`): any
 * other key, or a value of the wrong type, is refused rather than ignored.
 */
export function parseTemplateConfig(text: string): OpenAiHttpTemplate {
  let raw: unknown;
  try {
    raw = JSON.parse(text);
  } catch {
    throw new TemplateError("not valid JSON");
  }
  if (typeof raw !== "object" || raw === null || Array.isArray(raw)) throw new TemplateError("expected a JSON object");
  const o = raw as Record<string, unknown>;
  const unknown = Object.keys(o).filter((k) => !["command", "healthPath", "env"].includes(k));
  if (unknown.length > 0) throw new TemplateError(`unknown key "${unknown[0]!.slice(0, 40)}" (expected command, healthPath, env)`);
  if (!Array.isArray(o.command) || !o.command.every((a) => typeof a === "string"))
    throw new TemplateError("command must be an array of strings (argv)");
  if (o.healthPath !== undefined && typeof o.healthPath !== "string") throw new TemplateError("healthPath must be a string");
  if (o.env !== undefined && (typeof o.env !== "object" || o.env === null || Array.isArray(o.env)))
    throw new TemplateError("env must be an object of strings");
  const template: OpenAiHttpTemplate = {
    command: o.command as string[],
    ...(o.healthPath === undefined ? {} : { healthPath: o.healthPath as string }),
    ...(o.env === undefined ? {} : { env: o.env as Record<string, string> }),
  };
  validateTemplate(template);
  return template;
}

/**
 * Reads the template file named in the agent's configuration, and checks that its executable is
 * there: a regular, executable file (a link to one is fine, since packages install those).
 */
export async function readTemplateFile(path: string): Promise<OpenAiHttpTemplate> {
  if (!path.startsWith("/")) throw new TemplateError("the template file's path must be absolute");
  const st = await stat(path).catch(() => undefined);
  if (st === undefined || !st.isFile()) throw new TemplateError(`${path} is not a readable file`);
  if (st.size > MAX_CONFIG_BYTES) throw new TemplateError(`${path} is larger than ${MAX_CONFIG_BYTES} bytes`);
  const template = parseTemplateConfig(await readFile(path, "utf8"));
  const exe = template.command[0]!;
  const ok = await access(exe, constants.X_OK).then(
    async () => (await stat(exe)).isFile(),
    () => false,
  );
  if (!ok) throw new TemplateError(`the executable ${exe} is not an executable file`);
  return template;
}

const names: Record<string, (v: TemplateValues) => string | undefined> = {
  model: (v) => v.model,
  port: (v) => String(v.port),
  host: (v) => v.host,
  context_size: (v) => (v.contextSize === undefined ? undefined : String(v.contextSize)),
  threads: (v) => (v.threads === undefined ? undefined : String(v.threads)),
  gpus: (v) => (v.gpus === undefined || v.gpus.length === 0 ? undefined : v.gpus.join(",")),
  gpu_count: (v) => (v.gpus === undefined || v.gpus.length === 0 ? undefined : String(v.gpus.length)),
};

/**
 * The argv for one start: each placeholder replaced inside its own element, so a value can never
 * become a second argument. A placeholder whose value was not given is an error, not an empty string.
 */
export function buildArgv(t: OpenAiHttpTemplate, values: TemplateValues): string[] {
  if (!values.model.startsWith("/")) throw new TemplateError("the model path must be absolute");
  return t.command.map((arg) =>
    arg.replace(placeholder, (_, name: string) => {
      const value = Object.hasOwn(names, name) ? names[name]!(values) : undefined;
      if (value === undefined) {
        const why = name === "gpus" || name === "gpu_count" ? ": the runtime profile assigns no GPUs (gpu_count)" : "";
        throw new TemplateError(`no value for {${name}}${why}`);
      }
      return value;
    }),
  );
}
