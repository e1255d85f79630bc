// The Python example agent (examples/python/agent.py) against a real server: stubs generated from
// proto/ with grpc_tools.protoc into a temp directory, then it pins the CA, enrolls from a CSR,
// opens a Session, reports inventory, heartbeats, and completes a runtime.health.v1 job created
// through the admin API. Debian's python3-grpcio, python3-protobuf, python3-grpc-tools and
// python3-cryptography provide everything (.ci/run installs them); without them the test is skipped
// on a developer's machine and fails in CI.
import { execFileSync, spawn, spawnSync } from "node:child_process";
import { mkdtempSync, readdirSync, rmSync, statSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, relative } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { JobState } from "../../gen/proto/modelforge/admin/v1/admin_pb.js";
import { Liveness } from "../../gen/proto/modelforge/common/v1/common_pb.js";
import { startTestServer, type TestServer } from "../support/server.js";
import { repoRoot } from "../support/process.js";
import { TextFeed, waitFor } from "../support/wait.js";

/** Debian's interpreter, where apt-get puts python3-grpcio (a pyenv python3 on PATH would not see it). */
const python = "/usr/bin/python3";
const available = spawnSync(python, ["-c", "import grpc, grpc_tools, cryptography, google.protobuf"]).status === 0;

function protoFiles(dir: string): string[] {
  return readdirSync(dir).flatMap((name) => {
    const path = join(dir, name);
    if (statSync(path).isDirectory()) return protoFiles(path);
    return name.endsWith(".proto") ? [relative(join(repoRoot, "proto"), path)] : [];
  });
}

describe.skipIf(!available && process.env.CI === undefined)("the Python example agent", () => {
  let server: TestServer;
  let dir: string;
  let stubs: string;
  beforeAll(async () => {
    server = await startTestServer();
    dir = mkdtempSync(join(tmpdir(), "mf-python-"));
    stubs = join(dir, "stubs");
    execFileSync("mkdir", ["-p", stubs]);
    execFileSync(
      python,
      ["-m", "grpc_tools.protoc", "-Iproto", `--python_out=${stubs}`, `--grpc_python_out=${stubs}`, ...protoFiles(join(repoRoot, "proto"))],
      { cwd: repoRoot },
    );
  });
  afterAll(async () => {
    await server?.stop();
    if (dir !== undefined) rmSync(dir, { recursive: true, force: true });
  });

  const runPython = (args: string[]) => {
    const child = spawn(python, [join(repoRoot, "examples/python/agent.py"), ...args], {
      env: { PATH: process.env.PATH ?? "", PYTHONPATH: stubs, HOME: dir },
      stdio: ["ignore", "pipe", "pipe"],
    });
    const out = new TextFeed();
    let err = "";
    child.stdout.on("data", (c: Buffer) => out.append(c.toString()));
    child.stderr.on("data", (c: Buffer) => (err += c.toString()));
    const exited = new Promise<number | null>((resolve) => child.on("exit", (code) => resolve(code)));
    return { child, out, exited, stderr: () => err };
  };
  const events = (out: TextFeed) =>
    out
      .toString()
      .split("\n")
      .filter((l) => l.startsWith("{"))
      .map((l) => JSON.parse(l) as Record<string, unknown>);

  it("sees every field's bounds in the code generated from proto/ (buf.validate annotations)", () => {
    const read = [
      "from buf.validate import validate_pb2 as v",
      "from modelforge.agent.v1 import agent_pb2 as agent",
      "from modelforge.admin.v1 import admin_pb2 as admin",
      "rules = lambda m, f: m.DESCRIPTOR.fields_by_name[f].GetOptions().Extensions[v.field]",
      'print(rules(agent.EnrollRequest, "node_name").string.max_bytes)',
      'print(rules(agent.HeartbeatRequest, "capabilities").repeated.max_items, rules(agent.HeartbeatRequest, "capabilities").repeated.items.string.max_bytes)',
      'print(rules(admin.GetNodeRequest, "node_id").string.uuid)',
    ].join("\n");
    const out = execFileSync(python, ["-c", read], { env: { PATH: process.env.PATH ?? "", PYTHONPATH: stubs }, encoding: "utf8" });
    expect(out.trim().split("\n")).toEqual(["128", "64 64", "True"]);
  });

  it("refuses a server whose CA does not match the pinned fingerprint", async () => {
    const token = await server.admin.createEnrollmentToken({ nodeName: "py-wrong-ca" });
    const p = runPython([
      "enroll",
      "--server",
      server.url,
      "--token",
      token.token,
      "--ca-fingerprint",
      `sha256:${"0".repeat(64)}`,
      "--state",
      join(dir, "wrong"),
    ]);
    expect(await p.exited).not.toBe(0);
    expect(p.stderr()).toContain("refusing the server");
  });

  it("enrolls, opens a Session, heartbeats and completes a job created through the admin API", async () => {
    const token = await server.admin.createEnrollmentToken({ nodeName: "py-node" });
    const fingerprint = /--ca-fingerprint (\S+)/.exec(token.joinCommand)![1]!;
    const state = join(dir, "state");
    const enroll = runPython(["enroll", "--server", server.url, "--token", token.token, "--ca-fingerprint", fingerprint, "--state", state]);
    expect(await enroll.exited, enroll.stderr()).toBe(0);
    const nodeId = events(enroll.out).find((e) => e.event === "enrolled")?.node_id as string;
    expect(nodeId).toMatch(/^[0-9a-f-]{36}$/);
    expect(statSync(join(state, "node.key")).mode & 0o777).toBe(0o600);

    const agent = runPython(["run", "--state", state, "--jobs", "1"]);
    try {
      await waitFor(() => events(agent.out).some((e) => e.event === "ready"), {
        on: agent.out,
        what: () => `the Python agent ready (stdout: ${agent.out.toString()} stderr: ${agent.stderr()})`,
      });
      const { node } = await server.admin.getNode({ nodeId });
      expect(node).toMatchObject({
        agentVersion: "0.1.0",
        capabilities: ["runtime.health.v1"],
        connected: true,
        liveness: Liveness.ONLINE,
      });

      const { job } = await server.admin.createJob({ nodeId, spec: { kind: { case: "runtimeHealth", value: { runtimeId: "rt-py" } } } });
      expect(await agent.exited, agent.stderr()).toBe(0);
      const done = await server.admin.getJob({ jobId: job!.id });
      expect(done.job).toMatchObject({
        state: JobState.SUCCEEDED,
        attempt: 1,
        result: { result: { case: "runtimeHealth", value: { healthy: true, detail: "python example checked rt-py" } } },
      });
      expect(events(agent.out).map((e) => e.event)).toEqual([
        "session open",
        "inventory sent",
        "heartbeat answered",
        "ready",
        "lease",
        "completed",
      ]);
      const { cursors } = await server.admin.getNode({ nodeId });
      expect(cursors.find((c) => c.stream === "inventory")?.sequence).toBe(1n);
    } finally {
      agent.child.kill();
    }
  });
});
