#!/usr/bin/env node
// scripts/gpu-check.ts from a checkout: `node scripts/gpu-check.mjs [model.gguf ...]`. It runs the
// GPU artefact's build of it (dist/agent-gpu/gpu-check.mjs, `npm run build -- --gpu`) when there is
// one, since only that install carries the CUDA binaries; otherwise the source through tsx, which
// finds no CUDA build and says so. On a GPU node without a checkout, run gpu-check.mjs in the
// installed agent's directory.
import { spawnSync } from "node:child_process";
import { existsSync } from "node:fs";
import { fileURLToPath } from "node:url";

const built = fileURLToPath(new URL("../dist/agent-gpu/gpu-check.mjs", import.meta.url));
const args = existsSync(built)
  ? [built]
  : ["--import", import.meta.resolve("tsx"), fileURLToPath(new URL("gpu-check.ts", import.meta.url))];
const { status, error } = spawnSync(process.execPath, [...args, ...process.argv.slice(2)], { stdio: "inherit" });
if (error) throw error;
process.exit(status ?? 1);
