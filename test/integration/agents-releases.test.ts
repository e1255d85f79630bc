// Agent releases through the real TLS server and the real forge CLI: a pushed single-file agent is
// recorded with its digest and Ed25519 signature (verified by the control plane against its
// configured key), refused when the signature is missing or wrong or the content differs, and
// served only to a node a rollout is updating.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { generateKeyPairSync, sign } from "node:crypto";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Code, ConnectError } from "@connectrpc/connect";
import { startTestServer, testAdminKey, type TestServer } from "../support/server.js";
import { forgeAt, type ForgeRun } from "../support/forge.js";
import { enrollTestNode } from "../support/node.js";

let ts: TestServer;
let work: string;
let forge: (args: string[]) => Promise<ForgeRun>;
const keys = generateKeyPairSync("ed25519");
const agentFile = Buffer.from("#!/usr/bin/env node\nconsole.log('0.2.0');\n");

async function codeOf(p: Promise<unknown>): Promise<Code | undefined> {
  return p.then(
    () => undefined,
    (e: unknown) => ConnectError.from(e).code,
  );
}

function file(name: string, content: Uint8Array): string {
  const path = join(work, name);
  writeFileSync(path, content);
  return path;
}

beforeAll(async () => {
  work = mkdtempSync(join(tmpdir(), "mf-releases-"));
  const keyFile = file("release.pub", Buffer.from(keys.publicKey.export({ type: "spki", format: "pem" }) as string));
  ts = await startTestServer({ MODELFORGE_AGENT_RELEASE_KEY: keyFile });
  forge = forgeAt(ts.url, ts.caPem, work, testAdminKey);
}, 60_000);
afterAll(async () => {
  await ts?.stop();
  rmSync(work, { recursive: true, force: true });
});

describe("forge agents releases", () => {
  it("pushes and records a signed release, once", async () => {
    const agent = file("agent-0.2.0.mjs", agentFile);
    const sig = file("agent-0.2.0.sig", sign(null, agentFile, keys.privateKey));
    const pushed = await forge(["agents", "releases", "push", agent, "--version", "0.2.0", "--platform", "linux-x64", "--signature", sig]);
    expect(pushed.stderr).toBe("");
    expect(pushed.code).toBe(0);
    expect(pushed.stdout).toMatch(/^Recorded release 0\.2\.0 \(linux-x64\), .* signed\.\n$/);
    const again = await forge(["agents", "releases", "push", agent, "--version", "0.2.0", "--platform", "linux-x64", "--signature", sig]);
    expect(again.stdout).toContain("Already recorded: release 0.2.0");
    const listed = await forge(["agents", "releases", "list", "--json"]);
    const { releases } = JSON.parse(listed.stdout) as { releases: { version: string; signed: boolean; sha256: string }[] };
    expect(releases).toHaveLength(1);
    expect(releases[0]).toMatchObject({ version: "0.2.0", signed: true });
    // The bytes are an artifact like any other, under the release repository.
    const stored = await ts.admin.listArtifactFiles({ repository: "modelforge/agent" });
    expect(stored.files.map((f) => f.path)).toEqual(["modelforge-agent-0.2.0-linux-x64"]);
    expect(stored.files[0]!.sha256).toBe(releases[0]!.sha256);
    const audit = await ts.admin.listAuditEvents({ action: "agent.release.recorded" });
    expect(audit.events.map((e) => e.targetId)).toEqual(["0.2.0/linux-x64"]);
  });

  it("refuses a release whose signature does not verify, or that has none, recording nothing", async () => {
    const content = Buffer.from("#!/usr/bin/env node\nconsole.log('0.3.0');\n");
    const agent = file("agent-0.3.0.mjs", content);
    const forged = file("forged.sig", sign(null, Buffer.from("other content"), keys.privateKey));
    const bad = await forge(["agents", "releases", "push", agent, "--version", "0.3.0", "--signature", forged]);
    expect(bad.code).not.toBe(0);
    expect(bad.stderr).toContain("does not verify against the release signing key");
    const unsigned = await forge(["agents", "releases", "push", agent, "--version", "0.3.0"]);
    expect(unsigned.code).not.toBe(0);
    expect(unsigned.stderr).toContain("releases must be signed");
    const short = file("short.sig", Buffer.alloc(10));
    expect((await forge(["agents", "releases", "push", agent, "--version", "0.3.0", "--signature", short])).stderr).toContain(
      "an Ed25519 signature is 64 bytes",
    );
    expect((await ts.admin.listAgentReleases({})).releases.map((r) => r.version)).toEqual(["0.2.0"]);
  });

  it("refuses bad names, content not stored, and other content under a recorded version", async () => {
    const sha = "ab".repeat(32);
    const signature = new Uint8Array(64);
    const create = (over: object) =>
      codeOf(ts.admin.createAgentRelease({ version: "0.4.0", platform: "linux-x64", sha256: sha, sizeBytes: 10n, signature, ...over }));
    expect(await create({ version: "latest" })).toBe(Code.InvalidArgument);
    expect(await create({ platform: "../x" })).toBe(Code.InvalidArgument);
    expect(await create({ sha256: "AB".repeat(32) })).toBe(Code.InvalidArgument);
    expect(await create({ sizeBytes: 0n })).toBe(Code.InvalidArgument);
    expect(await create({})).toBe(Code.FailedPrecondition);
    const other = file("agent-other.mjs", Buffer.from("other"));
    const sig = file("other.sig", sign(null, Buffer.from("other"), keys.privateKey));
    const clash = await forge(["agents", "releases", "push", other, "--version", "0.2.0", "--platform", "linux-x64", "--signature", sig]);
    expect(clash.code).not.toBe(0);
    expect(clash.stderr).toContain("recorded with other content");
  });

  it("serves a release only to a node a rollout is updating", async () => {
    const node = await enrollTestNode(ts, "not-in-a-rollout");
    const client = await node.client();
    const download = async () => {
      for await (const _ of client.downloadAgentRelease({ version: "0.2.0", platform: "linux-x64" })) return;
    };
    expect(await codeOf(download())).toBe(Code.PermissionDenied);
  });

  it("refuses a signature when no key is configured", async () => {
    const plain = await startTestServer();
    try {
      const code = await codeOf(
        plain.admin.createAgentRelease({
          version: "0.2.0",
          platform: "linux-x64",
          sha256: "ab".repeat(32),
          sizeBytes: 1n,
          signature: new Uint8Array(64),
        }),
      );
      expect(code).toBe(Code.InvalidArgument);
    } finally {
      await plain.stop();
    }
  });
});
