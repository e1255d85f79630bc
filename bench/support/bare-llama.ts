// Bench-only: llama-server started by hand on a model, as a floor beside the same binary run by the
// agent: spawned (its own process group), its announced port read, stopped with SIGTERM.
import { spawn } from "node:child_process";
import { createInterface } from "node:readline";
import { llamaServerPath } from "../../agent/engines/supervisor.js";

export interface BareLlama {
  /** http://127.0.0.1:PORT */
  base: string;
  stop(): Promise<void>;
}

/** Starts llama-server on the model with one thread and one sequence; resolves once it listens (not yet healthy). */
export async function startBareLlama(modelPath: string, context: number): Promise<BareLlama> {
  const child = spawn(
    llamaServerPath,
    [
      "--model",
      modelPath,
      "--host",
      "127.0.0.1",
      "--port",
      "0",
      "--threads",
      "1",
      "--ctx-size",
      String(context),
      "--parallel",
      "1",
      "--no-webui",
    ],
    { env: { PATH: process.env.PATH ?? "", HOME: process.env.HOME ?? "/tmp" }, stdio: ["ignore", "ignore", "pipe"], detached: true },
  );
  const exited = new Promise((resolve) => child.once("exit", resolve));
  const port = await new Promise<number>((resolve, reject) => {
    createInterface({ input: child.stderr! }).on("line", (line) => {
      const listening = /listening on http:\/\/127\.0\.0\.1:(\d+)/.exec(line);
      if (listening) resolve(Number(listening[1]));
    });
    child.once("exit", () => reject(new Error("llama-server exited before listening")));
  });
  return {
    base: `http://127.0.0.1:${port}`,
    async stop() {
      process.kill(-child.pid!, "SIGTERM");
      await exited;
    },
  };
}
