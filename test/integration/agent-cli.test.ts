// The agent's command line as an operator uses it: the join command printed by
// CreateEnrollmentToken, run as given, enrolls the node; status shows the identity.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { execFile } from "node:child_process";
import { mkdirSync, mkdtempSync, statSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { promisify } from "node:util";
import { startTestServer, type TestServer } from "../support/server.js";
import { repoRoot, spawnAgent } from "../support/process.js";
import { enrollTestNode } from "../support/node.js";
import { waitFor } from "../support/wait.js";

const run = promisify(execFile);
let ts: TestServer;
beforeAll(async () => {
  ts = await startTestServer();
});
afterAll(() => ts?.stop());

async function agent(args: string[]): Promise<{ code: number; stdout: string; stderr: string }> {
  try {
    const { stdout, stderr } = await run(process.execPath, ["--import", "tsx", "agent/main.ts", ...args], { cwd: repoRoot });
    return { code: 0, stdout, stderr };
  } catch (err) {
    const e = err as { code: number; stdout: string; stderr: string };
    return { code: e.code, stdout: e.stdout, stderr: e.stderr };
  }
}

describe("agent CLI", () => {
  it("prints help", async () => {
    const r = await agent(["--help"]);
    expect(r.code).toBe(0);
    expect(r.stdout).toMatch(/enroll[\s\S]*run[\s\S]*status/);
  });

  it("enrolls with the join command as printed, then reports its identity", async () => {
    const statePath = join(mkdtempSync(join(tmpdir(), "mf-cli-agent-")), "state.json");
    expect((await agent(["status", "--state", statePath])).code).toBe(1);
    const created = await ts.admin.createEnrollmentToken({ nodeName: "cli-node" });
    const words = created.joinCommand.split(" ");
    expect(words.slice(0, 4)).toEqual(["npm", "run", "agent", "--"]);
    const r = await agent([...words.slice(4), "--state", statePath]);
    expect(r.stderr).toBe("");
    expect(r.code).toBe(0);
    const nodeId = /enrolled as node ([0-9a-f-]{36})/.exec(r.stdout)![1]!;
    expect(statSync(statePath).mode & 0o777).toBe(0o600);
    const status = await agent(["status", "--state", statePath]);
    expect(status.stdout).toContain(nodeId);
    expect(status.stdout).toContain(ts.server.ca.fingerprint);
    expect(status.stdout).not.toMatch(/PRIVATE KEY/);
    const again = await agent([...words.slice(4), "--state", statePath]);
    expect(again.code).toBe(1);
    expect(again.stderr).toMatch(/already exists/);
  });

  it("reports a wrong fingerprint in one line", async () => {
    const created = await ts.admin.createEnrollmentToken({});
    const statePath = join(mkdtempSync(join(tmpdir(), "mf-cli-agent-")), "state.json");
    const r = await agent([
      "enroll",
      "--server",
      ts.url,
      "--token",
      created.token,
      "--ca-fingerprint",
      `sha256:${"ab".repeat(32)}`,
      "--state",
      statePath,
    ]);
    expect(r.code).toBe(1);
    expect(r.stderr.trim().split("\n")).toHaveLength(1);
    expect(r.stderr).toMatch(/does not match/);
  });
});

describe("agent run's artifact roots", () => {
  const serving = { MODELFORGE_AGENT_ARTIFACT_SOURCES: "control-plane" };

  it("creates a missing root, and its parents, mode 0750, at start", async () => {
    const node = await enrollTestNode(ts, "roots-missing");
    const root = join(mkdtempSync(join(tmpdir(), "mf-roots-")), "srv", "models");
    const agentProcess = spawnAgent(node.statePath, { ...serving, MODELFORGE_AGENT_ARTIFACT_ROOTS: root });
    try {
      await waitFor(async () => (await ts.admin.getNode({ nodeId: node.nodeId })).node?.capabilities.includes("artifact.acquire.v1"), {
        what: () => `the agent advertising artifact.acquire.v1; its output:\n${agentProcess.output()}`,
      });
      const st = statSync(root);
      expect(st.isDirectory()).toBe(true);
      expect(st.mode & 0o777).toBe(0o750);
      expect(agentProcess.output()).toContain(`"root":"${root}","msg":"artifact root created"`);
    } finally {
      await agentProcess.stop();
    }
  });

  it("refuses to start, naming the root it cannot create", async () => {
    const node = await enrollTestNode(ts, "roots-blocked");
    const dir = mkdtempSync(join(tmpdir(), "mf-roots-"));
    const good = join(dir, "good");
    mkdirSync(good);
    writeFileSync(join(dir, "file"), "not a directory\n");
    const blocked = join(dir, "file", "models");
    const agentProcess = spawnAgent(node.statePath, { ...serving, MODELFORGE_AGENT_ARTIFACT_ROOTS: `${good},${blocked}` });
    // "close": after the output is all read, unlike "exit".
    const code = await new Promise<number | null>((resolve) => agentProcess.child.once("close", (c) => resolve(c)));
    expect(code).toBe(1);
    expect(agentProcess.output().trim().split("\n").at(-1)).toBe(
      `agent: MODELFORGE_AGENT_ARTIFACT_ROOTS: cannot create the artifact root ${blocked}: a file is in the way`,
    );
    expect(ts.server.sessionsConnected(node.nodeId)).toBe(false);
    expect((await ts.admin.getNode({ nodeId: node.nodeId })).node?.connected).toBe(false);
  });
});
