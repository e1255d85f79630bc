// The version skew policy: the rule as a table, then through a real server whose floor is above
// the agent's version. The real agent loop is refused at Hello with both versions named, says so
// once at error level, and retries at the slowest backoff pace instead of hot-looping; the admin
// API and the CLI's rendering flag the node as outdated.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import {
  agentVersionRefusal,
  compareVersions,
  defaultOldestAgentVersion,
  isAgentOutdated,
  parseVersion,
} from "../../server/agent-version.js";
import { loadConfig, ConfigError } from "../../server/config.js";
import { serverVersion } from "../../server/version.js";
import { agentVersion } from "../../agent/version.js";
import { VersionRefusals, versionRefusalDelay, versionRefusalOf } from "../../agent/session/version-refusal.js";
import { renderNodeDetail, renderNodeTable } from "../../cli/commands/nodes-render.js";
import { Code, ConnectError } from "@connectrpc/connect";
import { startTestServer, type TestServer } from "../support/server.js";
import { enrollTestNode, type TestNode } from "../support/node.js";
import { startAgent, type InProcessAgent } from "../support/agent.js";
import { waitFor } from "../support/wait.js";

describe("the version rule", () => {
  it.each([
    ["1.2.3", "1.2.3", 0],
    ["1.2.3", "1.2.4", -1],
    ["1.10.0", "1.9.9", 1],
    ["2.0.0", "1.99.99", 1],
    ["1.0.0-rc.1", "1.0.0", -1],
    ["1.0.0-alpha", "1.0.0-alpha.1", -1],
    ["1.0.0-alpha.2", "1.0.0-alpha.10", -1],
    ["1.0.0-1", "1.0.0-alpha", -1],
    ["1.0.0+build.5", "1.0.0", 0],
    ["v1.0.0", "1.0.0", 0],
  ])("%s against %s", (a, b, sign) => {
    expect(Math.sign(compareVersions(parseVersion(a)!, parseVersion(b)!))).toBe(sign);
  });

  it.each(["", "1", "1.2", "01.2.3", "1.2.3.4", "test", "1.2.3-", "1.2.x"])("%j is not a version", (text) => {
    expect(parseVersion(text)).toBeUndefined();
  });

  it.each([
    ["0.1.0", "0.0.0"],
    ["0.5.2", "0.3.0"],
    ["1.4.7", "1.2.0"],
    ["2.1.0", "2.0.0"],
  ])("a server at %s accepts agents from %s on by default", (server, oldest) => {
    expect(defaultOldestAgentVersion(server)).toBe(oldest);
  });

  it.each([
    ["1.2.0", "1.2.0", undefined],
    ["1.3.5", "1.2.0", undefined],
    [
      "1.1.9",
      "1.2.0",
      "agent version 1.1.9 is older than 1.2.0; this control plane (1.4.0) accepts agents from 1.2.0 on: upgrade the agent",
    ],
    ["1.2.0-rc.1", "1.2.0", "agent version 1.2.0-rc.1 is older than 1.2.0"],
    ["test", "1.2.0", 'agent version "test" is not a semantic version'],
    ["", "1.2.0", 'agent version "" is not a semantic version'],
    ["test", "0.0.0", undefined],
    ["", "0.0.0", undefined],
  ])("agent %j with floor %s", (agent, oldest, refusal) => {
    const got = agentVersionRefusal(agent, oldest, "1.4.0");
    if (refusal === undefined) expect(got).toBeUndefined();
    else expect(got).toContain(refusal);
  });

  it("flags recorded versions below the floor; an unknown version is not flagged", () => {
    expect(isAgentOutdated("1.1.0", "1.2.0")).toBe(true);
    expect(isAgentOutdated("1.2.0", "1.2.0")).toBe(false);
    expect(isAgentOutdated(null, "1.2.0")).toBe(false);
    expect(isAgentOutdated("", "1.2.0")).toBe(false);
  });

  it("is configured with MODELFORGE_MIN_AGENT_VERSION, defaulting from the server's own version", () => {
    expect(loadConfig({}).minAgentVersion).toBe(defaultOldestAgentVersion(serverVersion));
    expect(loadConfig({ MODELFORGE_MIN_AGENT_VERSION: "1.2.0" }).minAgentVersion).toBe("1.2.0");
    expect(() => loadConfig({ MODELFORGE_MIN_AGENT_VERSION: "latest" })).toThrow(ConfigError);
  });

  it("the agent waits the slowest backoff after a refusal and repeats its error line at most every ten minutes", () => {
    expect(versionRefusalOf(new ConnectError("agent version 0.1.0 is older", Code.FailedPrecondition))).toContain("older");
    expect(versionRefusalOf(new ConnectError("database unavailable", Code.Unavailable))).toBeUndefined();
    expect(versionRefusalDelay(30_000, () => 0)).toBe(15_000);
    expect(versionRefusalDelay(30_000, () => 0.999)).toBeLessThanOrEqual(30_000);
    const r = new VersionRefusals(600_000);
    expect(r.due(0)).toBe(true);
    expect(r.due(1_000)).toBe(false);
    expect(r.due(600_000)).toBe(true);
    r.accepted();
    expect(r.due(600_001)).toBe(true);
  });
});

describe("an agent older than the server accepts", () => {
  const floor = "99.0.0";
  let server: TestServer;
  let node: TestNode;
  let agent: InProcessAgent | undefined;
  beforeAll(async () => {
    server = await startTestServer({ MODELFORGE_MIN_AGENT_VERSION: floor });
    node = await enrollTestNode(server, "old-agent");
  });
  afterAll(async () => {
    await agent?.stop();
    await server?.stop();
  });

  it("is told at Hello, naming both versions, logs it once and does not hot-loop", async () => {
    const info = await server.anonymousAgent.getServerInfo({});
    expect(info.minAgentVersion).toBe(floor);

    agent = await startAgent(node, { backoff: { baseMs: 10, maxMs: 400 } });
    const refusedAt = performance.now();
    const refusals = () =>
      server
        .logs()
        .split("\n")
        .filter((l) => l.includes(`agent version ${agentVersion} is older than ${floor}`));
    // Three refusals seen by the server: the agent kept trying, slowly.
    await waitFor(() => refusals().length >= 3, { on: server.logFeed, what: "three refused Hellos" });
    const elapsed = performance.now() - refusedAt;
    const errors = agent
      .logs()
      .split("\n")
      .filter((l) => l.includes('"level":50'));
    expect(errors).toHaveLength(1);
    expect(JSON.parse(errors[0]!)).toMatchObject({ nodeId: node.nodeId, agentVersion, code: "failed_precondition" });
    expect(errors[0]).toContain(`agent version ${agentVersion} is older than ${floor}`);
    expect(errors[0]).toContain(`this control plane (${serverVersion})`);
    // Two waits of at least half the longest backoff between three attempts, however fast the machine.
    expect(elapsed).toBeGreaterThanOrEqual(2 * 200);
    // No "session failed" warnings for a refusal that only an upgrade fixes.
    expect(agent.logs()).not.toContain('"session failed"');
  });

  it("is flagged as outdated by the admin API and the CLI's node views", async () => {
    const { nodes } = await server.admin.listNodes({});
    const mine = nodes.find((n) => n.id === node.nodeId)!;
    expect(mine).toMatchObject({ agentVersion, agentOutdated: true, connected: false });
    expect(renderNodeTable([mine], new Date())).toContain(`${agentVersion} (outdated)`);
    const detail = await server.admin.getNode({ nodeId: node.nodeId });
    expect(renderNodeDetail(detail, new Date())).toMatch(/Agent outdated:\s+yes: older than the oldest version/);
  });
});
