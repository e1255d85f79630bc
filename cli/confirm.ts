// Interactive confirmation for destructive commands: the operator types the exact id back.
import { createInterface } from "node:readline";

/**
 * Writes `prompt` to `output` and reads one line from `input`. Resolves true only when the line,
 * trimmed, equals `expected`; end of input or Ctrl-C (the signal) resolve false.
 */
export function confirmByTyping(
  expected: string,
  prompt: string,
  input: NodeJS.ReadableStream,
  output: NodeJS.WritableStream,
  signal?: AbortSignal,
): Promise<boolean> {
  return new Promise((resolve) => {
    const rl = createInterface({ input, output, terminal: false });
    let settled = false;
    const finish = (ok: boolean) => {
      if (settled) return;
      settled = true;
      signal?.removeEventListener("abort", onAbort);
      rl.close();
      resolve(ok);
    };
    const onAbort = () => finish(false);
    signal?.addEventListener("abort", onAbort, { once: true });
    rl.once("line", (line) => finish(line.trim() === expected));
    rl.once("close", () => finish(false));
    output.write(prompt);
  });
}
