// Pre-registered nodes: `forge nodes register` (RegisterNode) creates a pending node with a name and
// labels and a one-time token bound to it; the agent that enrolls with the token becomes that node
// (same id, name and labels, audited as its enrollment). The token is single-use, expires, and is
// stored only as a hash.
import { createHash } from "node:crypto";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { PassThrough, Writable } from "node:stream";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { Code, ConnectError } from "@connectrpc/connect";
import { durationFromMs } from "@bufbuild/protobuf/wkt";
import { ManualClock } from "../../common/clock.js";
import { Liveness } from "../../gen/proto/modelforge/common/v1/common_pb.js";
import { enrollNode } from "../../agent/enroll.js";
import { runCli } from "../../cli/cli.js";
import { startTestServer, testAdminKey, type TestServer } from "../support/server.js";

let ts: TestServer;
let clock: ManualClock;
let dir: string;
beforeAll(async () => {
  clock = new ManualClock();
  ts = await startTestServer({}, { clock });
  dir = mkdtempSync(join(tmpdir(), "mf-register-"));
  writeFileSync(join(dir, "ca.crt"), ts.caPem);
});
afterAll(async () => {
  await ts.stop();
  rmSync(dir, { recursive: true, force: true });
});

async function forge(args: string[]): Promise<{ code: number; stdout: string; stderr: string }> {
  let stdout = "";
  let stderr = "";
  const sink = (write: (s: string) => void) =>
    new Writable({
      write(chunk: Buffer, _enc, cb) {
        write(chunk.toString());
        cb();
      },
    });
  const stdin = new PassThrough();
  stdin.end();
  const env = { MODELFORGE_SERVER: ts.url, MODELFORGE_CA_FILE: join(dir, "ca.crt"), MODELFORGE_OPERATOR_API_KEY: testAdminKey };
  const code = await runCli(args, {
    stdout: sink((s) => (stdout += s)),
    stderr: sink((s) => (stderr += s)),
    stdin,
    env,
    signal: new AbortController().signal,
  });
  return { code, stdout, stderr };
}

const enrollWith = (token: string, name: string, nodeName = "") =>
  enrollNode({ serverUrl: ts.url, token, caFingerprint: ts.server.ca.fingerprint, statePath: join(dir, `${name}.json`), name: nodeName });

const rejection = (p: Promise<unknown>) =>
  p.then(
    () => {
      throw new Error("expected a refusal");
    },
    (e: unknown) => ConnectError.from(e),
  );

describe("forge nodes register", () => {
  it("creates a pending node; the agent enrolls into it, keeping id, name and labels; the token is single-use", async () => {
    const r = await forge(["nodes", "register", "--name", "gpu-07", "--label", "rack=r7", "--label", "zone=a", "--json"]);
    expect(r.stderr).toBe("");
    expect(r.code).toBe(0);
    const res = JSON.parse(r.stdout) as { node: { id: string; name: string; liveness: string }; token: string; joinCommand: string };
    expect(res.node.name).toBe("gpu-07");
    expect(res.node.liveness).toBe("LIVENESS_PENDING");
    expect(res.joinCommand).toContain(`--token ${res.token}`);
    expect(res.joinCommand).toContain(`--ca-fingerprint ${ts.server.ca.fingerprint}`);

    // Before enrollment: listed, pending, no credential.
    const before = await ts.admin.getNode({ nodeId: res.node.id });
    expect(before.node?.liveness).toBe(Liveness.PENDING);
    expect(before.node?.labels).toEqual({ rack: "r7", zone: "a" });
    expect(before.credentials).toHaveLength(0);

    // Stored only as a hash.
    const stored = await ts.server.db.prisma.enrollmentToken.findFirstOrThrow({ where: { nodeId: res.node.id } });
    expect(stored.tokenHash).toBe(createHash("sha256").update(res.token).digest("hex"));
    expect(JSON.stringify(stored)).not.toContain(res.token);

    // The agent's own --name does not rename a registered node.
    const state = await enrollWith(res.token, "gpu-07", "some-hostname");
    expect(state.nodeId).toBe(res.node.id);
    const after = await ts.admin.getNode({ nodeId: res.node.id });
    expect(after.node?.name).toBe("gpu-07");
    expect(after.node?.labels).toEqual({ rack: "r7", zone: "a" });
    expect(after.credentials).toHaveLength(1);
    expect((await ts.admin.listNodes({})).nodes.filter((n) => n.name === "gpu-07")).toHaveLength(1);

    const actions = (await ts.admin.listAuditEvents({ targetId: res.node.id })).events.map((e) => e.action);
    expect(actions).toContain("node.registered");
    expect(actions).toContain("node.enrolled");
    expect(actions).not.toContain("node.reenrolled");

    const again = await rejection(enrollWith(res.token, "gpu-07-again"));
    expect(again.code).toBe(Code.Unauthenticated);
    expect(again.rawMessage).toBe("enrollment token used");
  });

  it("prints the token and join command once, in text", async () => {
    const r = await forge(["nodes", "register", "--name", "gpu-08"]);
    expect(r.code).toBe(0);
    expect(r.stdout).toMatch(/^Registered node [0-9a-f-]{36} \(gpu-08\), pending until its agent enrolls\./);
    expect(r.stdout).toMatch(/\n {2}npm run agent -- enroll --server \S+ --token mfet_\S+ --ca-fingerprint sha256:\S+\n$/);
  });

  it("needs a name and valid labels", async () => {
    expect((await forge(["nodes", "register"])).code).toBe(2);
    const bad = await rejection(ts.admin.registerNode({ name: "x", labels: { "bad key": "v" } }));
    expect(bad.code).toBe(Code.InvalidArgument);
    expect((await rejection(ts.admin.registerNode({ name: "  " }))).code).toBe(Code.InvalidArgument);
  });

  it("expires its token by the server's clock; a new token for the same node works", async () => {
    const res = await ts.admin.registerNode({ name: "gpu-09", ttl: durationFromMs(60_000) });
    clock.advance(60_000);
    const expired = await rejection(enrollWith(res.token, "gpu-09"));
    expect(expired.rawMessage).toBe("enrollment token expired");
    const fresh = await ts.admin.createEnrollmentToken({ nodeId: res.node!.id });
    expect((await enrollWith(fresh.token, "gpu-09")).nodeId).toBe(res.node!.id);
    expect((await ts.admin.getNode({ nodeId: res.node!.id })).node?.name).toBe("gpu-09");
  });
});
