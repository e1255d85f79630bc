// The `openai-http` engine: an external OpenAI-compatible server (vLLM, llama-server, TGI) started
// from a command template that only the node's operator writes, in the agent's configuration.
// A lease never carries a command: it can only choose the model path and engine parameters,
// which are substituted into the template's argv elements, never through a shell.

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
}

export class TemplateError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "TemplateError";
  }
}

const placeholder = /\{([a-z_]*)\}/g;

/** Checks a template once, when the configuration is read: fail closed on anything unexpected. */
export function validateTemplate(t: OpenAiHttpTemplate): void {
  const [exe, ...args] = t.command;
  if (exe === undefined || !exe.startsWith("/")) throw new TemplateError("the command's executable must be an absolute path");
  if (exe.includes("{")) throw new TemplateError("the executable cannot contain placeholders");
  for (const arg of args) {
    for (const [, name] of arg.matchAll(placeholder)) {
      if (!Object.hasOwn(names, name!)) throw new TemplateError(`unknown placeholder {${name}}`);
    }
  }
  if (!t.command.some((a) => a.includes("{port}"))) throw new TemplateError("the command must take the port ({port})");
  if (t.healthPath !== undefined && !/^\/[A-Za-z0-9/_.-]*$/.test(t.healthPath))
    throw new TemplateError("healthPath must be a plain absolute path");
}

const names: Record<string, (v: TemplateValues) => string | undefined> = {
  model: (v) => v.model,
  port: (v) => String(v.port),
  host: (v) => v.host,
  context_size: (v) => (v.contextSize === undefined ? undefined : String(v.contextSize)),
  threads: (v) => (v.threads === undefined ? undefined : String(v.threads)),
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
      if (value === undefined) throw new TemplateError(`no value for {${name}}`);
      return value;
    }),
  );
}
