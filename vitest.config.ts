import { defineConfig } from "vitest/config";

export default defineConfig({
  test: {
    include: ["test/**/*.test.ts"],
    // One migrated template database per run, copied for each test database.
    globalSetup: ["test/global-setup.ts"],
    // Real TLS servers, databases and agent processes: generous per-test time (a wait's own
    // deadline, test/support/wait.ts, names what did not happen first), files in parallel.
    testTimeout: 60_000,
    hookTimeout: 120_000,
    pool: "forks",
    // Two files at a time: vitest's default is one worker per core less one, which on a 2-core
    // machine ran every file in turn although most of their time is spent waiting on servers,
    // agents and databases (measured: the same 25 files in 137 s with one, 93 s with two).
    maxWorkers: 2,
  },
});
