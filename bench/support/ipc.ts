// Request/response over a child process's IPC channel, for the benchmarks' server and load
// generator processes. The parent calls `rpc.call(type, payload)`; the child answers with
// `serve(handlers)`. Unsolicited child messages ({ event, ... }) reach `rpc.onEvent`.
import { fork, type ChildProcess, type ForkOptions } from "node:child_process";
import { fileURLToPath } from "node:url";

interface Request {
  id: number;
  type: string;
  payload: unknown;
}
interface Response {
  id: number;
  ok: boolean;
  result?: unknown;
  error?: string;
}
export interface Event {
  event: string;
  [key: string]: unknown;
}

/** Forks a TypeScript module of this repository under tsx, with extra node flags. */
export function forkTs(
  module: URL,
  opts: { nodeFlags?: string[]; env?: NodeJS.ProcessEnv; stdio?: ForkOptions["stdio"] } = {},
): ChildProcess {
  return fork(fileURLToPath(module), [], {
    execArgv: ["--import", "tsx", ...(opts.nodeFlags ?? [])],
    env: opts.env ?? process.env,
    stdio: opts.stdio ?? ["ignore", "inherit", "inherit", "ipc"],
    serialization: "advanced",
  });
}

export class Rpc {
  private next = 0;
  private readonly waiting = new Map<number, { resolve(v: unknown): void; reject(e: Error): void }>();
  private readonly exited: Promise<number | null>;
  onEvent: (e: Event) => void = () => undefined;

  constructor(
    readonly child: ChildProcess,
    readonly name: string,
  ) {
    child.on("message", (m: Response | Event) => {
      if ("event" in m) return this.onEvent(m);
      const w = this.waiting.get(m.id);
      if (w === undefined) return;
      this.waiting.delete(m.id);
      if (m.ok) w.resolve(m.result);
      else w.reject(new Error(`${name}: ${m.error}`));
    });
    this.exited = new Promise((resolve) =>
      child.once("exit", (code) => {
        for (const w of this.waiting.values()) w.reject(new Error(`${name} exited (code ${code}) with a call pending`));
        this.waiting.clear();
        resolve(code);
      }),
    );
  }

  call<T>(type: string, payload: unknown = {}, timeoutMs = 600_000): Promise<T> {
    const id = ++this.next;
    return new Promise<T>((resolve, reject) => {
      const timer = setTimeout(() => {
        this.waiting.delete(id);
        reject(new Error(`${this.name}: "${type}" timed out after ${timeoutMs} ms`));
      }, timeoutMs);
      this.waiting.set(id, {
        resolve: (v) => {
          clearTimeout(timer);
          resolve(v as T);
        },
        reject: (e) => {
          clearTimeout(timer);
          reject(e);
        },
      });
      this.child.send({ id, type, payload } satisfies Request);
    });
  }

  /** Resolves with the first event of that name. */
  waitFor(event: string, timeoutMs = 120_000): Promise<Event> {
    return new Promise((resolve, reject) => {
      const previous = this.onEvent;
      const timer = setTimeout(() => reject(new Error(`${this.name}: no "${event}" within ${timeoutMs} ms`)), timeoutMs);
      this.exited.then(
        (code) => reject(new Error(`${this.name} exited (code ${code}) before "${event}"`)),
        () => undefined,
      );
      this.onEvent = (e) => {
        if (e.event === event) {
          clearTimeout(timer);
          this.onEvent = previous;
          resolve(e);
        } else previous(e);
      };
    });
  }

  /** Waits for the process to exit, killing it (by its own pid) after the grace period. */
  async exit(graceMs = 15_000): Promise<number | null> {
    const timer = setTimeout(() => this.child.kill("SIGKILL"), graceMs);
    const code = await this.exited;
    clearTimeout(timer);
    return code;
  }
}

/** In a forked child: answers the parent's calls. */
export function serve(handlers: Record<string, (payload: never) => unknown>): void {
  process.on("message", (m: Request) => {
    const h = handlers[m.type];
    Promise.resolve()
      .then(() => {
        if (h === undefined) throw new Error(`unknown call "${m.type}"`);
        return h(m.payload as never);
      })
      .then(
        (result) => process.send!({ id: m.id, ok: true, result } satisfies Response),
        (err: unknown) =>
          process.send!({ id: m.id, ok: false, error: err instanceof Error ? (err.stack ?? err.message) : String(err) } satisfies Response),
      );
  });
  // The parent going away ends this process too: no orphans.
  process.on("disconnect", () => process.exit(0));
}

export function emit(event: string, fields: Record<string, unknown> = {}): void {
  process.send?.({ event, ...fields });
}
