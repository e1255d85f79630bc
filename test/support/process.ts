// Runs the control plane as a real child process, as `npm start` does, and waits for it to serve.
import { spawn, type ChildProcess } from "node:child_process";
import { fileURLToPath } from "node:url";

export const repoRoot = fileURLToPath(new URL("../..", import.meta.url));

export interface ServerProcess {
  child: ChildProcess;
  /** Resolves with the URL from the "control plane serving" log line: the port is open. */
  listening: Promise<string>;
  /** Resolves with the URL once the database is open too ("control plane ready"). */
  ready: Promise<string>;
  stdout(): string;
  stderr(): string;
  exited: Promise<number | null>;
}

/** Whether a process of this pid is still running (signal 0 checks without sending anything). */
export function isAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

/** `args` picks what runs: the source through tsx by default, or e.g. the built `dist/server/main.mjs`. */
export function spawnServer(env: Record<string, string>, args: string[] = ["--import", "tsx", "server/main.ts"]): ServerProcess {
  const child = spawn(process.execPath, args, {
    cwd: repoRoot,
    env: {
      PATH: process.env.PATH ?? "",
      HOME: process.env.HOME ?? "/tmp",
      MODELFORGE_LISTEN_ADDRESS: "127.0.0.1",
      MODELFORGE_PORT: "0",
      ...env,
    },
    stdio: ["ignore", "pipe", "pipe"],
  });
  let out = "";
  let err = "";
  child.stderr!.on("data", (c: Buffer) => (err += c.toString()));
  const exited = new Promise<number | null>((resolve) => child.on("exit", (code) => resolve(code)));
  const waitFor = (msg: string) => {
    const p = new Promise<string>((resolve, reject) => {
      const look = () => {
        const m = new RegExp(`"url":"(https://[^"]+)"[^\\n]*"msg":"${msg}"`).exec(out);
        if (m) resolve(m[1]!);
      };
      child.stdout!.on("data", look);
      void exited.then((code) => reject(new Error(`server exited with ${code} before "${msg}": ${err}`)));
    });
    p.catch(() => undefined);
    return p;
  };
  child.stdout!.on("data", (c: Buffer) => (out += c.toString()));
  return {
    child,
    listening: waitFor("control plane serving"),
    ready: waitFor("control plane ready"),
    exited,
    stdout: () => out,
    stderr: () => err,
  };
}

export interface AgentProcess {
  child: ChildProcess;
  output(): string;
  /** Sends SIGTERM and waits for the exit; rejects, naming it, if that takes longer than 30 s. */
  stop(): Promise<number | null>;
  /** SIGKILL: the agent dies without a goodbye, as a crashed node would. */
  kill(): Promise<number | null>;
}

/** How long an agent may take to stop after SIGTERM (it ends its session and stops its runtimes). */
const stopDeadlineMs = 30_000;

/** Runs `agent run` as a real process, with the fake nvidia-smi first on PATH; `entry` is node's arguments before it (the source by default, or a built bundle). */
export function spawnAgent(
  statePath: string,
  env: Record<string, string> = {},
  entry = ["--import", "tsx", "agent/main.ts"],
): AgentProcess {
  const fakeBin = fileURLToPath(new URL("../fixtures/nvidia-smi", import.meta.url));
  const child = spawn(process.execPath, [...entry, "run", "--state", statePath], {
    cwd: repoRoot,
    env: {
      PATH: `${fakeBin}:${process.env.PATH ?? ""}`,
      HOME: process.env.HOME ?? "/tmp",
      MODELFORGE_AGENT_BACKOFF_BASE: "100ms",
      MODELFORGE_AGENT_BACKOFF_MAX: "500ms",
      ...env,
    },
    stdio: ["ignore", "pipe", "pipe"],
  });
  let out = "";
  child.stdout!.on("data", (c: Buffer) => (out += c.toString()));
  child.stderr!.on("data", (c: Buffer) => (out += c.toString()));
  const exited = new Promise<number | null>((resolve) => child.on("exit", (code) => resolve(code)));
  return {
    child,
    output: () => out,
    stop: async () => {
      child.kill("SIGTERM");
      // A graceful stop that hangs is a bug to name, not a hook timeout to guess at.
      const timer = setTimeout(() => child.kill("SIGKILL"), stopDeadlineMs);
      const start = performance.now();
      const code = await exited;
      clearTimeout(timer);
      if (performance.now() - start >= stopDeadlineMs) {
        throw new Error(
          `the agent did not exit within ${stopDeadlineMs / 1000} s of SIGTERM (killed); its last output:\n${out.slice(-2000)}`,
        );
      }
      return code;
    },
    kill: () => {
      child.kill("SIGKILL");
      return exited;
    },
  };
}
