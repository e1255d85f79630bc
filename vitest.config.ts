import { defineConfig } from "vitest/config";

export default defineConfig({
  test: {
    include: ["test/**/*.test.ts"],
    // Real TLS servers, databases and agent processes: generous per-test time, files in parallel.
    testTimeout: 30_000,
    hookTimeout: 60_000,
    pool: "forks",
  },
});
