import { defineConfig } from "vitest/config";

// Three projects, by what a test needs (docs/testing.md says where a new test goes):
// - unit: pure rules and in-memory fakes; no server, process, database or socket. Under a minute.
// - integration: real TLS servers, agents, runtimes, browsers; run once, on the database
//   MODELFORGE_TEST_DB names (the embedded one by default).
// - database: tests whose subject is the database itself (its SQL, claims, locks, two control
//   planes on one database); CI runs them on the embedded database and again on PostgreSQL.
const serverTests = {
  // One migrated template database per run, copied for each test database.
  globalSetup: ["test/global-setup.ts"],
  // Real TLS servers, databases and agent processes: generous per-test time (a wait's own
  // deadline, test/support/wait.ts, names what did not happen first).
  testTimeout: 60_000,
  hookTimeout: 120_000,
};

export default defineConfig({
  test: {
    pool: "forks",
    // Two files at a time: vitest's default is one worker per core less one, which on a 2-core
    // machine ran every file in turn although most of their time is spent waiting on servers,
    // agents and databases (measured: the same 25 files in 137 s with one, 93 s with two).
    maxWorkers: 2,
    projects: [
      { extends: true, test: { name: "unit", include: ["test/unit/**/*.test.ts"] } },
      { extends: true, test: { name: "integration", include: ["test/integration/**/*.test.ts"], ...serverTests } },
      { extends: true, test: { name: "database", include: ["test/database/**/*.test.ts"], ...serverTests } },
    ],
  },
});
