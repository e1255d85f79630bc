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
  },
});
