// Runs the forge CLI in-process against a test server, as an operator would from a shell.
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { PassThrough, Writable } from "node:stream";
import { runCli } from "../../cli/cli.js";

export interface ForgeRun {
  code: number;
  stdout: string;
  stderr: string;
}

/** A stream that keeps what is written to it. */
export function textSink(): Writable & { text: string } {
  const w = new Writable({
    write(chunk: Buffer, _enc, cb) {
      w.text += chunk.toString();
      cb();
    },
  }) as Writable & { text: string };
  w.text = "";
  return w;
}

/** A forge bound to the server at `url` (its CA written into `dir`), with the operator key `key`. */
export function forgeAt(url: string, caPem: string, dir: string, key: string): (args: string[]) => Promise<ForgeRun> {
  const caFile = join(dir, "forge-ca.crt");
  writeFileSync(caFile, caPem);
  return async (args) => {
    const stdout = textSink();
    const stderr = textSink();
    const stdin = new PassThrough();
    stdin.end();
    const env = { MODELFORGE_SERVER: url, MODELFORGE_CA_FILE: caFile, MODELFORGE_OPERATOR_API_KEY: key };
    const code = await runCli(args, { stdout, stderr, stdin, env, signal: new AbortController().signal });
    return { code, stdout: stdout.text, stderr: stderr.text };
  };
}
