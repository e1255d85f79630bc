// `npm run example:model -- DIR`: writes a tiny llama-architecture GGUF with random weights into DIR
// (created if missing), offline, so a new user can push, deploy and call a model without
// downloading one. llama.cpp loads it and generates real tokens; the text is noise.
import { mkdir } from "node:fs/promises";
import { join } from "node:path";
import { parseArgs } from "node:util";
import { writeTinyLlamaGguf } from "./gguf.js";

const usage = `Usage: npm run example:model -- [DIR] [--seed N]

Writes DIR/tiny.gguf (default DIR: ./data/example-model), a tiny llama model with random weights:
the same seed gives the same bytes. Push DIR with forge artifacts push.
`;

async function main(argv: string[]): Promise<number> {
  let parsed: ReturnType<typeof parse>;
  try {
    parsed = parse(argv);
  } catch (err) {
    process.stderr.write(`example:model: ${(err as Error).message}\n\n${usage}`);
    return 2;
  }
  if (parsed.values.help) {
    process.stdout.write(usage);
    return 0;
  }
  if (parsed.positionals.length > 1) {
    process.stderr.write(`example:model: one directory at most, got ${parsed.positionals.length}\n\n${usage}`);
    return 2;
  }
  const seedText = parsed.values.seed ?? "1";
  const seed = Number(seedText);
  if (!Number.isInteger(seed) || seed < 0 || seed > 0xffffffff) {
    process.stderr.write(`example:model: --seed: expected an integer from 0 to 4294967295, got "${seedText}"\n`);
    return 2;
  }
  const dir = parsed.positionals[0] ?? join("data", "example-model");
  await mkdir(dir, { recursive: true });
  const path = join(dir, "tiny.gguf");
  const { sha256, size } = await writeTinyLlamaGguf(path, { seed });
  process.stdout.write(`wrote ${path} (${size} bytes, sha256 ${sha256})\n`);
  return 0;
}

function parse(argv: string[]) {
  return parseArgs({
    args: argv,
    allowPositionals: true,
    options: { seed: { type: "string" }, help: { type: "boolean", short: "h" } },
  });
}

main(process.argv.slice(2)).then(
  (code) => process.exit(code),
  (err: unknown) => {
    process.stderr.write(`example:model: ${(err as Error).message}\n`);
    process.exit(1);
  },
);
