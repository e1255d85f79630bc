// The operator CLI `forge`: pure formatting and parsing helpers, and every command through
// `runCli` (everything the entry point does but exit) against a real TLS control plane, in this
// process. A few smoke tests run the real entry point as a child process (`node --import tsx
// cli/main.ts ...`): help, an API error's exit code, and a watch ended by Ctrl-C.
import { spawn } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { PassThrough, Writable } from "node:stream";
import { textSink } from "../support/forge.js";
import { fileURLToPath } from "node:url";
import { afterAll, describe, expect, it } from "vitest";
import { pino } from "pino";
import { startTestServer, testAdminKey } from "../support/server.js";
import { generousMs, waitFor } from "../support/wait.js";
import { enrollNode } from "../../agent/enroll.js";
import { runAgent, type SessionJobs, type SessionLink } from "../../agent/session/run.js";
import { JobFailureCode, type JobLease } from "../../gen/proto/modelforge/jobs/v1/jobs_pb.js";
import { Liveness } from "../../gen/proto/modelforge/common/v1/common_pb.js";
import {
  clean,
  enumName,
  formatAge,
  formatBytes,
  formatDuration,
  formatLabels,
  formatPercent,
  formatTime,
  progressLine,
  table,
} from "../../cli/format.js";
import { parseEnumList, parseIntFlag, parseLabels, parseSince, UsageError } from "../../cli/args.js";
import { loadJobSpec } from "../../cli/commands/jobs.js";
import { confirmByTyping } from "../../cli/confirm.js";
import { groups, runCli } from "../../cli/cli.js";

const root = fileURLToPath(new URL("../..", import.meta.url));

// ---------------------------------------------------------------------------------------------
// Pure helpers

describe("format", () => {
  it.each([
    [0, "0s"],
    [999, "<1s"],
    [1000, "1s"],
    [4_500, "4s"],
    [59_999, "59s"],
    [60_000, "1m"],
    [192_000, "3m12s"],
    [3_600_000, "1h"],
    [7_500_000, "2h5m"],
    [7_205_000, "2h"],
    [86_400_000 * 3 + 3_600_000 * 4 + 59_000, "3d4h"],
    [-4_000, "4s"],
  ])("formatDuration(%d) = %s", (ms, text) => {
    expect(formatDuration(ms)).toBe(text);
  });

  const now = new Date("2024-05-01T12:00:00Z");
  it.each([
    [undefined, "never"],
    [new Date("2024-05-01T12:00:00Z"), "just now"],
    [new Date("2024-05-01T11:59:59.500Z"), "just now"],
    [new Date("2024-05-01T11:59:56Z"), "4s ago"],
    [new Date("2024-05-01T11:56:48Z"), "3m12s ago"],
    [new Date("2024-04-30T12:00:00Z"), "1d ago"],
    [new Date("2024-05-01T12:10:00Z"), "in 10m"],
  ])("formatAge(%s) = %s", (when, text) => {
    expect(formatAge(when, now)).toBe(text);
  });

  it.each([
    [0n, "0 B"],
    [1023, "1023 B"],
    [1024, "1.0 KiB"],
    [1536n, "1.5 KiB"],
    [10n * 1024n * 1024n, "10 MiB"],
    [81920n * 1024n * 1024n, "80 GiB"],
    [81559n * 1024n * 1024n, "79 GiB"],
    [1n << 60n, "1.0 EiB"],
  ])("formatBytes(%s) = %s", (bytes, text) => {
    expect(formatBytes(bytes)).toBe(text);
  });

  it("formats times, percents, labels and enum names", () => {
    expect(formatTime(new Date("2024-05-01T12:00:03.456Z"))).toBe("2024-05-01 12:00:03Z");
    expect(formatTime(undefined)).toBe("-");
    expect(formatPercent(45)).toBe("45.0%");
    expect(formatPercent(99.96)).toBe("100.0%");
    expect(formatLabels({ zone: "b", gpu: "a100" })).toBe("gpu=a100,zone=b");
    expect(formatLabels({})).toBe("-");
    expect(enumName(Liveness, Liveness.ONLINE)).toBe("online");
    expect(enumName(Liveness, 42)).toBe("unknown(42)");
  });

  it("aligns tables and strips control characters from cells", () => {
    expect(
      table(
        ["ID", "NAME", "X"],
        [
          ["1", "alpha", "y"],
          ["22", "b", ""],
        ],
      ),
    ).toBe("ID  NAME   X\n1   alpha  y\n22  b\n");
    expect(table(["A"], [])).toBe("A\n");
    expect(clean("evil\u001b[2Jname\n")).toBe("evil?[2Jname?");
    expect(table(["N"], [["a\u001b]0;x\u0007"]])).not.toContain("\u001b");
  });

  it.each([
    [{ percent: 0, bytesDone: 0n, bytesTotal: 0n, message: "" }, "[----------]    0.0%"],
    [
      { percent: 40, bytesDone: 400n * 1048576n, bytesTotal: 1000n * 1048576n, message: "downloading" },
      "[####------]   40.0%  400 MiB / 1000 MiB  downloading",
    ],
    [{ percent: 250, bytesDone: 2048n, bytesTotal: 0n, message: "" }, "[##########]  100.0%  2.0 KiB"],
    [{ percent: -5, bytesDone: 0n, bytesTotal: 0n, message: "a\u001bb" }, "[----------]    0.0%  a?b"],
  ])("progressLine %#", (p, text) => {
    expect(progressLine(p, 10)).toBe(text);
  });
});

describe("argument parsing", () => {
  it("parses labels and refuses malformed ones", () => {
    expect(parseLabels(["zone=a", "note=x=y", "empty="])).toEqual({ zone: "a", note: "x=y", empty: "" });
    expect(parseLabels(undefined)).toEqual({});
    expect(() => parseLabels(["novalue"])).toThrow(UsageError);
    expect(() => parseLabels(["=v"])).toThrow(/KEY=VALUE/);
    expect(() => parseLabels(["a=1", "a=2"])).toThrow(/more than once/);
  });

  it("parses comma-separated enum names", () => {
    expect(parseEnumList("online, STALE,online", Liveness, "--liveness")).toEqual([Liveness.ONLINE, Liveness.STALE]);
    expect(parseEnumList(undefined, Liveness, "--liveness")).toEqual([]);
    expect(() => parseEnumList("online,sleepy", Liveness, "--liveness")).toThrow(/unknown value "sleepy".*pending, online/);
    expect(() => parseEnumList("unspecified", Liveness, "--liveness")).toThrow(UsageError);
  });

  it("parses --since as a duration back or an ISO time", () => {
    const now = new Date("2024-05-01T12:00:00Z");
    expect(parseSince("1h", now).toISOString()).toBe("2024-05-01T11:00:00.000Z");
    expect(parseSince("30m", now).toISOString()).toBe("2024-05-01T11:30:00.000Z");
    expect(parseSince("2024-04-30T08:00:00Z", now).toISOString()).toBe("2024-04-30T08:00:00.000Z");
    expect(() => parseSince("yesterday", now)).toThrow(UsageError);
    expect(() => parseSince("2024-13-45", now)).toThrow(/ISO 8601/);
  });

  it("parses bounded integers", () => {
    expect(parseIntFlag("10", "--limit", 1, 1000)).toBe(10);
    expect(() => parseIntFlag("0", "--limit", 1, 1000)).toThrow(/between 1 and 1000/);
    expect(() => parseIntFlag("1.5", "--limit", 1, 1000)).toThrow(/whole number/);
  });

  it("loads a JSON job spec and names the file in every error", () => {
    const from = (text: string) => () => Buffer.from(text);
    expect(loadJobSpec("spec.json", from('{"runtimeHealth": {"runtimeId": "rt-1"}}')).kind).toEqual({
      case: "runtimeHealth",
      value: expect.objectContaining({ runtimeId: "rt-1" }),
    });
    expect(() => loadJobSpec("spec.json", from("{oops"))).toThrow(/^spec\.json: not valid JSON/);
    expect(() => loadJobSpec("spec.json", from("[]"))).toThrow(/^spec\.json: expected a JSON object/);
    expect(() => loadJobSpec("spec.json", from("{}"))).toThrow(/^spec\.json: the job spec sets no capability.*artifactAcquire/);
    expect(() => loadJobSpec("spec.json", from('{"runtimeHealth": {"runtimeId": 7, "x": 1}}'))).toThrow(
      /^spec\.json: not a valid modelforge\.jobs\.v1\.JobSpec/,
    );
    expect(() => loadJobSpec("spec.yaml", from("runtimeHealth: {}"))).toThrow(/YAML is not supported/);
    expect(() =>
      loadJobSpec("gone.json", () => {
        throw Object.assign(new Error("no such file"), { code: "ENOENT" });
      }),
    ).toThrow(/^gone\.json: cannot read the job spec \(ENOENT\)/);
  });

  it("confirms only when the exact id is typed back", async () => {
    const ask = async (typed: string | null) => {
      const input = new PassThrough();
      let prompt = "";
      const output = new Writable({
        write(chunk: Buffer, _enc, cb) {
          prompt += chunk.toString();
          cb();
        },
      });
      const answer = confirmByTyping("node-1", "Type the node id: ", input, output);
      if (typed === null) input.end();
      else input.write(typed);
      return { ok: await answer, prompt };
    };
    expect(await ask("node-1\n")).toEqual({ ok: true, prompt: "Type the node id: " });
    expect((await ask("  node-1  \n")).ok).toBe(true);
    expect((await ask("node-2\n")).ok).toBe(false);
    expect((await ask("yes\n")).ok).toBe(false);
    expect((await ask(null)).ok).toBe(false);
  });
});

// ---------------------------------------------------------------------------------------------
// The CLI against a real server

const server = await startTestServer();
const tmp = mkdtempSync(join(tmpdir(), "mf-cli-"));
const caFile = join(tmp, "ca.crt");
writeFileSync(caFile, server.caPem);
const agents = new AbortController();
const agentRuns: Promise<void>[] = [];
afterAll(async () => {
  agents.abort();
  await Promise.allSettled(agentRuns);
  await server.stop();
  rmSync(tmp, { recursive: true, force: true });
});

interface Run {
  code: number;
  stdout: string;
  stderr: string;
}

function cliEnv(env: Record<string, string | undefined>): Record<string, string> {
  const merged: Record<string, string | undefined> = {
    MODELFORGE_SERVER: server.url,
    MODELFORGE_CA_FILE: caFile,
    MODELFORGE_OPERATOR_API_KEY: testAdminKey,
    ...env,
  };
  for (const k of Object.keys(merged)) if (merged[k] === undefined) delete merged[k];
  return merged as Record<string, string>;
}

/** Runs `forge args...` in this process; stdin is empty (not a TTY). The admin key must never appear in output. */
async function forge(args: string[], env: Record<string, string | undefined> = {}): Promise<Run> {
  const stdout = textSink();
  const stderr = textSink();
  const stdin = new PassThrough();
  stdin.end();
  const code = await runCli(args, { stdout, stderr, stdin, env: cliEnv(env), signal: new AbortController().signal });
  expect(stdout.text + stderr.text).not.toContain(testAdminKey);
  return { code, stdout: stdout.text, stderr: stderr.text };
}

/** The real entry point as a child process, with the same environment. */
function start(args: string[], env: Record<string, string | undefined> = {}) {
  const inherited: Record<string, string> = {};
  for (const k of ["PATH", "HOME", "TMPDIR", "SYSTEMROOT"]) if (process.env[k] !== undefined) inherited[k] = process.env[k]!;
  return spawn(process.execPath, ["--import", "tsx", "cli/main.ts", ...args], {
    cwd: root,
    env: { ...inherited, ...cliEnv(env) },
    stdio: ["pipe", "pipe", "pipe"],
  });
}

/** Runs `forge args...` as a child process, as `forge()` does in this one. */
function forgeProcess(args: string[]): Promise<Run> {
  return new Promise((resolve, reject) => {
    const child = start(args);
    let stdout = "";
    let stderr = "";
    child.stdout.on("data", (d: Buffer) => (stdout += d.toString()));
    child.stderr.on("data", (d: Buffer) => (stderr += d.toString()));
    child.on("error", reject);
    child.on("close", (code) => {
      expect(stdout + stderr).not.toContain(testAdminKey);
      resolve({ code: code ?? -1, stdout, stderr });
    });
    child.stdin.end();
  });
}

async function forgeJson<T = Record<string, unknown>>(args: string[]): Promise<T> {
  const r = await forge([...args, "--json"]);
  expect(r.stderr).toBe("");
  expect(r.code).toBe(0);
  return JSON.parse(r.stdout) as T;
}

const randomId = "6f1f0d8e-3b7a-4c59-9d2e-0b1a2c3d4e5f";

/** A node enrolled with a token made by the CLI, identity kept in a temp state file. */
async function enroll(name: string, labels: string[] = []): Promise<{ nodeId: string; statePath: string }> {
  const created = await forgeJson<{ token: string }>(["tokens", "create", "--name", name, ...labels.flatMap((l) => ["--label", l])]);
  const statePath = join(tmp, `${name}.json`);
  const state = await enrollNode({ serverUrl: server.url, token: created.token, caFingerprint: server.server.ca.fingerprint, statePath });
  return { nodeId: state.nodeId, statePath };
}

describe("forge help and usage", () => {
  it("prints the command list with --help, exit 0 (child process)", async () => {
    const r = await forgeProcess(["--help"]);
    expect(r.code).toBe(0);
    for (const cmd of [
      "tokens create",
      "tokens list",
      "tokens revoke ID",
      "nodes list",
      "nodes get ID",
      "nodes watch",
      "nodes decommission ID",
      "jobs create",
      "jobs watch ID",
      "audit list",
    ]) {
      expect(r.stdout).toContain(cmd);
    }
    expect(r.stdout).toContain("--admin-key KEY");
    expect(r.stdout).toContain("MODELFORGE_OPERATOR_API_KEY");
    expect((await forge(["help"])).stdout).toBe(r.stdout);
  });

  it("says what the CLI covers: every group's topic, in one line", async () => {
    const description = (await forge(["--help"])).stdout.split("\n")[2]!;
    expect(description).toBe(
      "The ModelForge operator CLI: sign-in, sign-out, who you are, users, enrollment and personal tokens, nodes, jobs, the artifact store, runtime profiles, deployments and their logs, " +
        "service keys, service clients' usage, agent upgrades and the audit log.",
    );
    for (const g of groups) expect(description).toContain(g.topic);
  });

  it("prints group and command help at every level", async () => {
    const group = await forge(["nodes", "--help"]);
    expect(group.code).toBe(0);
    expect(group.stdout).toMatch(/Usage: forge nodes <command>/);
    expect(group.stdout).toContain("decommission ID");
    const cmd = await forge(["nodes", "decommission", "-h"]);
    expect(cmd.code).toBe(0);
    expect(cmd.stdout).toMatch(/Usage: forge nodes decommission ID \[options\]/);
    expect(cmd.stdout).toContain("--yes");
    expect(cmd.stdout).toContain("--preview");
    const jobs = await forge(["help", "jobs", "create"]);
    expect(jobs.code).toBe(0);
    expect(jobs.stdout).toContain("YAML is not supported");
  });

  it("exits 2 on usage errors", async () => {
    const none = await forge([]);
    expect(none.code).toBe(2);
    expect(none.stderr).toContain("Usage: forge");
    const unknown = await forge(["frobnicate"]);
    expect(unknown.code).toBe(2);
    expect(unknown.stderr).toContain('error: unknown command "frobnicate"');
    const badFlag = await forge(["nodes", "list", "--colour"]);
    expect(badFlag.code).toBe(2);
    expect(badFlag.stderr).toMatch(/error: Unknown option '--colour'/);
    expect(badFlag.stderr).toContain('Run "forge nodes list --help"');
    const missing = await forge(["nodes", "get"]);
    expect(missing.code).toBe(2);
    expect(missing.stderr).toContain("error: missing ID");
    const badLiveness = await forge(["nodes", "list", "--liveness", "sleepy"]);
    expect(badLiveness.code).toBe(2);
    expect(badLiveness.stderr).toContain('unknown value "sleepy"');
    const groupOnly = await forge(["tokens"]);
    expect(groupOnly.code).toBe(2);
    expect(groupOnly.stderr).toContain("Usage: forge tokens");
  });
});

describe("forge against an empty fleet", () => {
  it("nodes list says there are no nodes", async () => {
    const r = await forge(["nodes", "list"]);
    expect(r).toEqual({ code: 0, stdout: "No nodes.\n", stderr: "" });
    const json = await forgeJson<{ nodes?: unknown[] }>(["nodes", "list"]);
    expect(json.nodes ?? []).toEqual([]);
  });

  it("nodes get of an unknown id fails with not_found, exit 1 (child process)", async () => {
    const r = await forgeProcess(["nodes", "get", randomId]);
    expect(r.code).toBe(1);
    expect(r.stdout).toBe("");
    expect(r.stderr).toBe(`error: not_found: node ${randomId} not found\n`);
  });
});

describe("forge authentication and connection", () => {
  it("a wrong admin key is unauthenticated, exit 1, and the key is never printed", async () => {
    const r = await forge(["nodes", "list"], { MODELFORGE_OPERATOR_API_KEY: "wrong-key-4f9a2c" });
    expect(r.code).toBe(1);
    expect(r.stderr).toMatch(/^error: unauthenticated: /);
    expect(r.stdout + r.stderr).not.toContain("wrong-key-4f9a2c");
  });

  it("no admin key at all is a configuration error, exit 2", async () => {
    const r = await forge(["nodes", "list"], { MODELFORGE_OPERATOR_API_KEY: undefined });
    expect(r.code).toBe(2);
    expect(r.stderr).toContain("MODELFORGE_OPERATOR_API_KEY");
  });

  it("--admin-key works but warns, and is not echoed", async () => {
    const r = await forge(["nodes", "list", "--admin-key", testAdminKey], { MODELFORGE_OPERATOR_API_KEY: undefined });
    expect(r.code).toBe(0);
    expect(r.stderr).toContain("warning: --admin-key is visible");
  });

  it("flags override the environment; a missing CA file is reported by name", async () => {
    const r = await forge(["nodes", "list", "--server", server.url, "--ca", join(tmp, "nope.crt")], {
      MODELFORGE_SERVER: "https://127.0.0.1:1",
    });
    expect(r.code).toBe(2);
    expect(r.stderr).toContain(`cannot read the CA certificate ${join(tmp, "nope.crt")}`);
    const ok = await forge(["nodes", "list", "--server", server.url], { MODELFORGE_SERVER: "https://127.0.0.1:1" });
    expect(ok.code).toBe(0);
  });
});

describe("forge tokens", () => {
  it("create prints the token once with its expiry and join command; list and revoke never show it", async () => {
    const created = await forge(["tokens", "create", "--name", "gpu-01", "--ttl", "15m", "--label", "zone=a"]);
    expect(created.code).toBe(0);
    expect(created.stderr).toBe("");
    const secret = /--token (\S+)/.exec(created.stdout)?.[1];
    const id = /Token ID:\s+(\S+)/.exec(created.stdout)?.[1];
    expect(secret).toBeTruthy();
    expect(id).toMatch(/^[0-9a-f-]{36}$/);
    expect(created.stdout).toContain("shown once");
    expect(created.stdout).toMatch(/Expires:\s+\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}Z \(in 1[45]m\d*s?\)/);
    expect(created.stdout).toContain(`--ca-fingerprint ${server.server.ca.fingerprint}`);
    expect(created.stdout).toContain("zone=a");

    const list = await forge(["tokens", "list"]);
    expect(list.code).toBe(0);
    expect(list.stdout).toMatch(/^ID\s+STATE\s+NAME\s+NODE\s+CREATED\s+EXPIRES\s+LABELS\n/);
    expect(list.stdout).toMatch(new RegExp(`${id}\\s+active\\s+gpu-01\\s+-\\s+(just now|\\d+s ago)\\s+in 1[45]m`));
    expect(list.stdout).not.toContain(secret);
    const listJson = await forge(["tokens", "list", "--json"]);
    expect(listJson.stdout).not.toContain(secret);
    const tokens = (JSON.parse(listJson.stdout) as { enrollmentTokens: { id: string; state: string; labels: object }[] }).enrollmentTokens;
    expect(tokens.find((t) => t.id === id)).toMatchObject({ state: "ENROLLMENT_TOKEN_STATE_ACTIVE", labels: { zone: "a" } });

    const revoked = await forge(["tokens", "revoke", id!]);
    expect(revoked).toEqual({ code: 0, stdout: `Enrollment token ${id} is revoked.\n`, stderr: "" });
    expect((await forge(["tokens", "list"])).stdout).toMatch(new RegExp(`${id}\\s+revoked\\s+gpu-01`));
    // Revoking again is idempotent.
    const again = await forgeJson<{ enrollmentToken: { id: string; state: string } }>(["tokens", "revoke", id!]);
    expect(again.enrollmentToken).toMatchObject({ id, state: "ENROLLMENT_TOKEN_STATE_REVOKED" });
  });

  it("create --json is the protobuf JSON of the response, one document", async () => {
    const r = await forge(["tokens", "create", "--json", "--ttl", "1h"]);
    expect(r.code).toBe(0);
    const doc = JSON.parse(r.stdout) as { token: string; joinCommand: string; enrollmentToken: { id: string; expiresAt: string } };
    expect(doc.token).toBeTruthy();
    expect(doc.joinCommand).toContain(doc.token);
    expect(Date.parse(doc.enrollmentToken.expiresAt) - Date.now()).toBeGreaterThan(59 * 60_000);
  });

  it("refuses a bad --ttl (usage, exit 2) and a bad id (server, exit 1)", async () => {
    const ttl = await forge(["tokens", "create", "--ttl", "soon"]);
    expect(ttl.code).toBe(2);
    expect(ttl.stderr).toContain("--ttl: expected a duration");
    const tooLong = await forge(["tokens", "create", "--ttl", "30d"]);
    expect(tooLong.code).toBe(1);
    expect(tooLong.stderr).toMatch(/^error: invalid_argument: ttl/);
    const unknown = await forge(["tokens", "revoke", randomId]);
    expect(unknown.code).toBe(1);
    expect(unknown.stderr).toMatch(/^error: not_found: /);
  });
});

describe("forge audit", () => {
  it("audit list shows the token creation", async () => {
    const { enrollmentToken } = await forgeJson<{ enrollmentToken: { id: string } }>(["tokens", "create", "--name", "audited"]);
    const r = await forge(["audit", "list", "--action", "enrollment_token.created", "--since", "1h"]);
    expect(r.code).toBe(0);
    expect(r.stdout).toMatch(/^TIME\s+ACTOR\s+ACTION\s+TARGET\s+CORRELATION\s+DETAILS\n/);
    expect(r.stdout).toMatch(
      new RegExp(`break-glass\\s+enrollment_token\\.created\\s+enrollment_token/${enrollmentToken.id}\\s+[0-9a-f-]{36}`),
    );

    const byTarget = await forgeJson<{ events: { action: string; targetId: string; actor: string }[] }>([
      "audit",
      "list",
      "--target",
      enrollmentToken.id,
    ]);
    expect(byTarget.events).toEqual([
      expect.objectContaining({ action: "enrollment_token.created", targetId: enrollmentToken.id, actor: "break-glass" }),
    ]);

    const limited = await forgeJson<{ events: unknown[] }>(["audit", "list", "--limit", "1"]);
    expect(limited.events).toHaveLength(1);
    const future = await forge(["audit", "list", "--since", "2999-01-01T00:00:00Z"]);
    expect(future).toEqual({ code: 0, stdout: "No audit events.\n", stderr: "" });
    expect((await forge(["audit", "list", "--limit", "0"])).code).toBe(2);
    expect((await forge(["audit", "list", "--since", "last tuesday"])).code).toBe(2);
  });
});

describe("forge nodes with an enrolled node", () => {
  let nodeId = "";

  it("nodes list and nodes get show the node", async () => {
    nodeId = (await enroll("cli-node-1", ["rack=r7"])).nodeId;
    const list = await forge(["nodes", "list"]);
    expect(list.code).toBe(0);
    expect(list.stdout).toMatch(/^ID\s+NAME\s+LIVENESS\s+GPUS\s+LAST HEARTBEAT\s+AGENT\s+CONNECTED\n/);
    expect(list.stdout).toMatch(new RegExp(`${nodeId}\\s+cli-node-1\\s+pending\\s+0\\s+never\\s+\\S+\\s+no\\n`));
    expect((await forge(["nodes", "list", "--liveness", "online,stale"])).stdout).toBe("No nodes match.\n");
    expect((await forge(["nodes", "list", "--label", "rack=r7"])).stdout).toContain(nodeId);
    expect((await forge(["nodes", "list", "--label", "rack=r8"])).stdout).toBe("No nodes match.\n");

    const get = await forge(["nodes", "get", nodeId]);
    expect(get.code).toBe(0);
    for (const section of ["Node\n", "Host\n", "GPUs (0)\n", "Telemetry\n", "Stream cursors\n", "Credentials\n"]) {
      expect(get.stdout).toContain(section);
    }
    expect(get.stdout).toMatch(/Liveness:\s+pending/);
    expect(get.stdout).toMatch(/Labels:\s+rack=r7/);
    expect(get.stdout).toMatch(/Last heartbeat:\s+never/);
    const detail = await forgeJson<{ node: { id: string }; credentials: { serial: string }[] }>(["nodes", "get", nodeId]);
    expect(detail.node.id).toBe(nodeId);
    expect(detail.credentials).toHaveLength(1);
    expect(get.stdout).toMatch(
      new RegExp(`${detail.credentials[0]!.serial}\\s+\\d{4}-\\d{2}-\\d{2} [\\d:]+Z\\s+\\d{4}-\\d{2}-\\d{2} [\\d:]+Z\\s+-`),
    );
  });

  it("nodes watch streams lines until Ctrl-C, then exits 0 (child process)", async () => {
    const child = start(["nodes", "watch"]);
    child.stdin.end();
    let stdout = "";
    const exited = new Promise<number | null>((resolve) => child.on("close", resolve));
    await new Promise<void>((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`no watch line; got ${JSON.stringify(stdout)}`)), generousMs);
      child.stdout.on("data", (d: Buffer) => {
        stdout += d.toString();
        if (stdout.includes(nodeId)) {
          clearTimeout(timer);
          resolve();
        }
      });
    });
    child.kill("SIGINT");
    expect(await exited).toBe(0);
    expect(stdout).toMatch(new RegExp(`${nodeId}\\s+cli-node-1\\s+pending\\s+gpus=0\\s+disconnected\\s+last heartbeat never`));
  });

  it("nodes disable / enable / rotate / revoke", async () => {
    const disabled = await forge(["nodes", "disable", nodeId, "--reason", "bad fan"]);
    expect(disabled).toEqual({ code: 0, stdout: `Node ${nodeId} (cli-node-1) is disabled.\n`, stderr: "" });
    expect((await forge(["nodes", "list", "--liveness", "disabled"])).stdout).toMatch(new RegExp(`${nodeId}\\s+cli-node-1\\s+disabled`));
    expect((await forge(["nodes", "get", nodeId])).stdout).toMatch(/Disabled because:\s+bad fan/);

    const enabled = await forgeJson<{ node: { liveness: string } }>(["nodes", "enable", nodeId]);
    expect(enabled.node.liveness).toBe("LIVENESS_PENDING");

    const rotated = await forge(["nodes", "rotate", nodeId]);
    expect(rotated.code).toBe(0);
    expect(rotated.stdout).toContain("delivered at the node's next call");

    const unknownSerial = await forge(["nodes", "revoke", nodeId, "--serial", "ABCDEF"]);
    expect(unknownSerial.code).toBe(1);
    expect(unknownSerial.stderr).toMatch(/^error: not_found: credential ABCDEF/);
  });

  it("decommission without --yes and without a TTY previews, then refuses with exit 2", async () => {
    const r = await forge(["nodes", "decommission", nodeId]);
    expect(r.code).toBe(2);
    expect(r.stdout).toContain(`Decommissioning node ${nodeId} (cli-node-1)`);
    expect(r.stdout).toMatch(/revoke 1 active credential/);
    expect(r.stderr).toContain("refusing to decommission");
    expect(r.stderr).toContain("--yes");
    // Nothing changed.
    expect((await forge(["nodes", "list"])).stdout).toMatch(new RegExp(`${nodeId}\\s+cli-node-1\\s+pending`));

    const json = await forge(["nodes", "decommission", nodeId, "--json"]);
    expect(json.code).toBe(2);
    expect(json.stdout).toBe("");

    const preview = await forgeJson<{ credentialSerials: string[] }>(["nodes", "decommission", nodeId, "--preview"]);
    expect(preview.credentialSerials).toHaveLength(1);
    expect((await forge(["nodes", "decommission", nodeId, "--preview", "--yes"])).code).toBe(2);
  });

  it("decommission --yes decommissions", async () => {
    const r = await forge(["nodes", "decommission", nodeId, "--yes", "--reason", "retired"]);
    expect(r.code).toBe(0);
    expect(r.stdout).toContain(`Node ${nodeId} (cli-node-1) is decommissioned.`);
    expect(r.stdout).toMatch(/revoked credentials:\n\s+[0-9A-F]+\n/);
    expect((await forge(["nodes", "list"])).stdout).toMatch(new RegExp(`${nodeId}\\s+cli-node-1\\s+decommissioned`));
    const get = await forge(["nodes", "get", nodeId]);
    expect(get.stdout).toMatch(/Decommissioned:\s+\d{4}/);
    expect(get.stdout).toMatch(/REVOKED\s+REASON\n\s+[0-9A-F]+\s+\S+ \S+\s+\S+ \S+\s+\d{4}-\d{2}-\d{2} \S+\s+\S/);
    const detail = await forgeJson<{ credentials: { revokedAt?: string }[] }>(["nodes", "get", nodeId]);
    expect(detail.credentials.every((c) => c.revokedAt !== undefined)).toBe(true);
    const again = await forge(["nodes", "decommission", nodeId, "--yes"]);
    expect(again.code).toBe(1);
    expect(again.stderr).toMatch(/^error: failed_precondition: /);
  });
});

describe("forge jobs", () => {
  it("jobs create with a malformed spec file fails clearly, naming the file, before any call", async () => {
    const bad = join(tmp, "bad-spec.json");
    writeFileSync(bad, '{"artifactAcquire": {"repository": "org/model", "branch": "main"}}');
    const r = await forge(["jobs", "create", "--node", randomId, "--spec", bad]);
    expect(r.code).toBe(2);
    expect(r.stdout).toBe("");
    expect(r.stderr).toContain(`error: ${bad}: not a valid modelforge.jobs.v1.JobSpec`);
    expect(r.stderr).toContain('"branch"');

    const notJson = join(tmp, "not-json.json");
    writeFileSync(notJson, "artifactAcquire:\n  repository: org/model\n");
    const r2 = await forge(["jobs", "create", "--node", randomId, "--spec", notJson]);
    expect(r2.code).toBe(2);
    expect(r2.stderr).toContain(`error: ${notJson}: not valid JSON`);

    const yaml = join(tmp, "spec.yaml");
    writeFileSync(yaml, "runtimeHealth: {}\n");
    const r3 = await forge(["jobs", "create", "--node", randomId, "--spec", yaml]);
    expect(r3.code).toBe(2);
    expect(r3.stderr).toContain("YAML is not supported");

    const missing = await forge(["jobs", "create", "--node", randomId]);
    expect(missing.code).toBe(2);
    expect(missing.stderr).toContain("missing --spec");
  });

  it("jobs create / list / get / watch / cancel against a live agent", async () => {
    const { nodeId, statePath } = await enroll("cli-jobs-node");
    // A stand-in agent job runner: runtime.health.v1 jobs for "ok" succeed, "broken" fail, and
    // "hold" never finish until cancelled.
    const jobs: SessionJobs = {
      capabilities: () => ["runtime.health.v1"],
      runningJobIds: () => [],
      onLease(lease: JobLease, link: SessionLink) {
        const runtimeId = lease.spec?.kind.case === "runtimeHealth" ? lease.spec.kind.value.runtimeId : "";
        const ids = { jobId: lease.jobId, attempt: lease.attempt };
        void (async () => {
          await link.send({ case: "jobProgress", value: { ...ids, progress: { percent: 50, message: "probing" } } });
          if (runtimeId === "hold") return;
          if (runtimeId === "broken") {
            await link.send({
              case: "jobFail",
              value: { ...ids, failure: { code: JobFailureCode.RUNTIME_ERROR, message: "runtime is gone", retryable: false } },
            });
          } else {
            await link.send({
              case: "jobComplete",
              value: { ...ids, result: { result: { case: "runtimeHealth", value: { healthy: true, detail: "ok" } } } },
            });
          }
        })().catch(() => undefined);
      },
      onCancel() {},
    };
    const log = pino({ level: "silent" });
    agentRuns.push(runAgent({ statePath, log, signal: agents.signal, jobs }).catch(() => undefined));
    await waitFor(
      async () => {
        const { node } = await server.admin.getNode({ nodeId });
        return node?.connected && node.capabilities.includes("runtime.health.v1");
      },
      { what: "the agent connected with its capability" },
    );

    const spec = (runtimeId: string) => {
      const file = join(tmp, `health-${runtimeId}.json`);
      writeFileSync(file, JSON.stringify({ runtimeHealth: { runtimeId } }));
      return file;
    };
    const create = async (runtimeId: string) =>
      (await forgeJson<{ job: { id: string } }>(["jobs", "create", "--node", nodeId, "--spec", spec(runtimeId), "--max-attempts", "1"])).job
        .id;

    const textCreate = await forge(["jobs", "create", "--node", nodeId, "--spec", spec("ok"), "--ordering-key", "k1"]);
    expect(textCreate.code).toBe(0);
    const okId = /Created job (\S+) \(runtime\.health\.v1\)/.exec(textCreate.stdout)?.[1];
    expect(okId).toBeTruthy();
    const watchedOk = await forge(["jobs", "watch", okId!]);
    expect(watchedOk.code).toBe(0);
    expect(watchedOk.stdout).toContain(`Job ${okId} succeeded.`);

    const brokenId = await create("broken");
    const watchedBroken = await forge(["jobs", "watch", brokenId]);
    expect(watchedBroken.code).toBe(1);
    expect(watchedBroken.stdout).toContain(`Job ${brokenId} failed: runtime_error: runtime is gone`);

    const list = await forge(["jobs", "list", "--node", nodeId]);
    expect(list.code).toBe(0);
    expect(list.stdout).toMatch(new RegExp(`${okId}\\s+${nodeId}\\s+runtime\\.health\\.v1\\s+succeeded`));
    expect(list.stdout).toMatch(new RegExp(`${brokenId}\\s+${nodeId}\\s+runtime\\.health\\.v1\\s+failed`));
    const failedOnly = await forgeJson<{ jobs: { id: string }[] }>(["jobs", "list", "--state", "failed"]);
    expect(failedOnly.jobs.map((j) => j.id)).toEqual([brokenId]);
    const byKey = await forgeJson<{ jobs: { id: string }[] }>(["jobs", "list", "--ordering-key", "k1"]);
    expect(byKey.jobs.map((j) => j.id)).toEqual([okId]);

    const get = await forge(["jobs", "get", okId!]);
    expect(get.code).toBe(0);
    expect(get.stdout).toMatch(/Capability:\s+runtime\.health\.v1/);
    expect(get.stdout).toMatch(/State:\s+succeeded/);
    expect(get.stdout).toContain("Result\n");
    expect(get.stdout).toContain('"runtimeId": "ok"');

    const holdId = await create("hold");
    const cancelled = await forge(["jobs", "cancel", holdId, "--reason", "no longer needed"]);
    expect(cancelled.code).toBe(0);
    const after = await forgeJson<{ job: { state: string; cancelRequested?: boolean } }>(["jobs", "get", holdId]);
    expect(after.job.cancelRequested === true || after.job.state === "JOB_STATE_CANCELLED").toBe(true);

    const unknown = await forge(["jobs", "get", randomId]);
    expect(unknown.code).toBe(1);
    expect(unknown.stderr).toMatch(/^error: not_found: /);
    expect((await forge(["jobs", "watch", randomId])).code).toBe(1);
  });
});

describe("forge runtimes", () => {
  it("creates a profile once, answers the same content as existing, refuses other content, and lists it", async () => {
    const made = await forge(["runtimes", "create", "cli-tiny", "--engine", "llama.cpp", "--context-size", "2048", "--threads", "2"]);
    expect(made.code, made.stderr).toBe(0);
    expect(made.stdout).toContain("Runtime profile cli-tiny created.");
    expect(made.stdout).toMatch(/Engine:\s+llama\.cpp/);
    expect(made.stdout).toMatch(/Content hash:\s+[0-9a-f]{64}/);
    expect(made.stdout).toMatch(/Parallel:\s+chosen from the model/);
    const batched = await forge(["runtimes", "create", "cli-batched", "--engine", "llama.cpp", "--parallel", "8", "--batch-size", "1024"]);
    expect(batched.code, batched.stderr).toBe(0);
    expect(batched.stdout).toMatch(/Parallel:\s+8\n/);
    expect(batched.stdout).toMatch(/Batch size:\s+1024\n/);
    expect((await forge(["runtimes", "create", "x", "--engine", "llama.cpp", "--parallel", "0"])).code).toBe(2);
    const remoteParallel = await forge(["runtimes", "create", "x", "--engine", "openai-http", "--parallel", "2"]);
    expect(remoteParallel.stderr).toMatch(/^error: invalid_argument: parallel: only a llama\.cpp profile sets parallel/);

    const again = await forge(["runtimes", "create", "cli-tiny", "--engine", "llama.cpp", "--context-size", "2048", "--threads", "2"]);
    expect(again.code).toBe(0);
    expect(again.stdout).toContain("already exists with this content");

    const changed = await forge(["runtimes", "create", "cli-tiny", "--engine", "llama.cpp", "--context-size", "4096"]);
    expect(changed.code).toBe(1);
    expect(changed.stderr).toMatch(/^error: already_exists: runtime profile "cli-tiny" exists with other content/);

    expect((await forge(["runtimes", "create", "x", "--engine", "vllm"])).code).toBe(2);
    expect((await forge(["runtimes", "create", "x"])).code).toBe(2);
    expect((await forge(["runtimes", "create", "x", "--engine", "llama.cpp", "--threads", "-1"])).code).toBe(2);
    const remote = await forge(["runtimes", "create", "cli-remote", "--engine", "openai-http", "--memory-bytes", String(8 * 2 ** 30)]);
    expect(remote.code, remote.stderr).toBe(0);
    expect(remote.stdout).toMatch(/Memory:\s+8\.0 GiB/);
    const llamaMemory = await forge(["runtimes", "create", "x", "--engine", "llama.cpp", "--memory-bytes", "1"]);
    expect(llamaMemory.stderr).toMatch(/^error: invalid_argument: memory_bytes: only an openai-http profile declares memory/);
    const vllm = await forge([
      "runtimes",
      "create",
      "cli-vllm",
      "--engine",
      "openai-http",
      "--gpu-count",
      "2",
      "--gpu-memory-bytes",
      String(20 * 2 ** 30),
      "--gpu-shared",
    ]);
    expect(vllm.code, vllm.stderr).toBe(0);
    expect(vllm.stdout).toMatch(/GPUs:\s+2, 20 GiB each, shared/);
    const offload = await forge(["runtimes", "create", "cli-offload", "--engine", "llama.cpp", "--gpu-layers", "all", "--gpu-count", "1"]);
    expect(offload.code, offload.stderr).toBe(0);
    expect(offload.stdout).toMatch(/GPUs:\s+1, all layers/);
    expect((await forge(["runtimes", "create", "x", "--engine", "llama.cpp", "--gpu-layers", "some"])).code).toBe(2);
    const noCount = await forge(["runtimes", "create", "x", "--engine", "llama.cpp", "--gpu-layers", "20"]);
    expect(noCount.stderr).toMatch(/^error: invalid_argument: gpu_count: must be at least 1 to offload layers/);
    const badName = await forge(["runtimes", "create", "Bad Name", "--engine", "llama.cpp"]);
    expect(badName.code).toBe(1);
    expect(badName.stderr).toMatch(/^error: invalid_argument: name: must be 1 to 64 characters/);

    const list = await forge(["runtimes", "list"]);
    expect(list.code).toBe(0);
    expect(list.stdout).toMatch(/cli-tiny\s+llama\.cpp\s+2048\s+2\s+auto\s+-\s+[0-9a-f]{12}/);
    expect(list.stdout).toMatch(/cli-batched\s+llama\.cpp\s+default\s+default\s+8\s+-\s+[0-9a-f]{12}/);
    expect(list.stdout).toMatch(/cli-vllm\s+openai-http\s+default\s+default\s+-\s+2\s+[0-9a-f]{12}/);
    const json = await forgeJson<{ profiles: { name: string; spec: { engine: string; contentHash: string } }[] }>(["runtimes", "list"]);
    const profile = json.profiles.find((p) => p.name === "cli-tiny")!;
    expect(profile.spec.engine).toBe("ENGINE_KIND_LLAMA_CPP");
    expect(profile.spec.contentHash).toMatch(/^[0-9a-f]{64}$/);
  });
});
