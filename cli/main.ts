// `forge`: the ModelForge operator CLI. Run with `npm run forge -- <args>` (tsx cli/main.ts).
import { runCli } from "./cli.js";

const stop = new AbortController();
let interruptible = false;
let interrupts = 0;
const onSignal = (signal: NodeJS.Signals) => {
  // The first Ctrl-C lets a watch or a prompt end cleanly; otherwise, or the second time, exit now.
  if (!interruptible || ++interrupts > 1) process.exit(signal === "SIGTERM" ? 143 : 130);
  stop.abort();
};
process.on("SIGINT", onSignal);
process.on("SIGTERM", onSignal);
// `forge nodes list | head`: a closed pipe is not an error worth a stack trace.
process.stdout.on("error", (err: NodeJS.ErrnoException) => {
  if (err.code === "EPIPE") process.exit(0);
  throw err;
});

const code = await runCli(process.argv.slice(2), {
  stdout: process.stdout,
  stderr: process.stderr,
  stdin: process.stdin,
  env: process.env,
  signal: stop.signal,
  setInterruptible: (b) => (interruptible = b),
});
// Open HTTP/2 sessions would keep the process alive: exit once the output is flushed.
process.stdout.write("", () => process.stderr.write("", () => process.exit(code)));
