// Node identity, tested as an attacker would, over the real TLS server: one-time enrollment
// tokens, CA pinning, certificates from other CAs or past their time, revocation on open streams,
// renewal and rotation, disable and decommission, and logs that never carry a secret.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { mkdtempSync, existsSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { pino } from "pino";
import { Code, ConnectError } from "@connectrpc/connect";
import { durationFromMs, timestampMs } from "@bufbuild/protobuf/wkt";
import { toJson } from "@bufbuild/protobuf";
import { ListEnrollmentTokensResponseSchema } from "../../gen/proto/modelforge/admin/v1/admin_pb.js";
import { startTestServer, type TestServer } from "../support/server.js";
import { enrollTestNode, eventually, type TestNode } from "../support/node.js";
import { enrollNode, EnrollError } from "../../agent/enroll.js";
import { generateNodeKeyAndCsr } from "../../agent/pki/keys.js";
import { nodeClient, pinnedClient } from "../../agent/session/transport.js";
import { runAgent } from "../../agent/session/run.js";
import { loadOrCreateCa } from "../../server/identity/pki/ca.js";
import { readState } from "../../agent/state.js";
import { ManualClock } from "../../common/clock.js";

let ts: TestServer;
const secrets: string[] = [];

beforeAll(async () => {
  ts = await startTestServer({ MODELFORGE_HEARTBEAT_INTERVAL: "200ms" });
});
afterAll(async () => {
  // Every log line of the whole file, scanned once at the end.
  const logs = ts.logs();
  for (const s of secrets) expect(logs).not.toContain(s);
  expect(logs).not.toMatch(/PRIVATE KEY|BEGIN CERTIFICATE|CERTIFICATE REQUEST|mfet_/);
  await ts.stop();
});

async function token(opts: { nodeName?: string; nodeId?: string; ttlMs?: number } = {}) {
  const res = await ts.admin.createEnrollmentToken({
    nodeName: opts.nodeName ?? "",
    nodeId: opts.nodeId ?? "",
    ttl: opts.ttlMs !== undefined ? durationFromMs(opts.ttlMs) : undefined,
  });
  secrets.push(res.token);
  return res;
}

// One key for every raw enrollment: the server does not require distinct keys.
const raw = await generateNodeKeyAndCsr("raw");
function enrollRaw(tokenSecret: string, server: TestServer = ts) {
  return { call: pinnedClient(server.url, server.caPem).enroll({ token: tokenSecret, csrPem: raw.csrPem }) };
}

async function rejection(p: Promise<unknown>): Promise<ConnectError> {
  const err = await p.then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(err).toBeInstanceOf(ConnectError);
  return err as ConnectError;
}

const activeCredentials = (nodeId: string) => ts.server.db.prisma.nodeCredential.count({ where: { nodeId, revokedAt: null } });

describe("enrollment tokens", () => {
  it("a 60-way storm on one token yields exactly one node and one active credential", async () => {
    const t = await token({ nodeName: "storm" });
    // One key for all callers keeps the test fast; the claim does not depend on the key.
    const { csrPem } = await generateNodeKeyAndCsr("storm");
    const results = await Promise.allSettled(
      Array.from({ length: 60 }, () => pinnedClient(ts.url, ts.caPem).enroll({ token: t.token, csrPem })),
    );
    const won = results.filter((r) => r.status === "fulfilled");
    expect(won).toHaveLength(1);
    for (const r of results) {
      if (r.status === "rejected") {
        expect(r.reason).toBeInstanceOf(ConnectError);
        expect((r.reason as ConnectError).code).toBe(Code.Unauthenticated);
        expect((r.reason as ConnectError).rawMessage).toBe("enrollment token used");
      }
    }
    const nodeId = (won[0] as PromiseFulfilledResult<{ nodeId: string }>).value.nodeId;
    expect(await ts.server.db.prisma.node.count({ where: { name: "storm" } })).toBe(1);
    expect(await activeCredentials(nodeId)).toBe(1);
  });

  it("refuses reused, revoked and unknown tokens", async () => {
    const used = await token();
    await enrollRaw(used.token).call;
    expect((await rejection(enrollRaw(used.token).call)).rawMessage).toBe("enrollment token used");

    const revoked = await token();
    await ts.admin.revokeEnrollmentToken({ id: revoked.enrollmentToken!.id });
    expect((await rejection(enrollRaw(revoked.token).call)).rawMessage).toBe("enrollment token revoked");

    const wrong = await rejection(enrollRaw(`mfet_${"A".repeat(43)}`).call);
    expect(wrong.code).toBe(Code.Unauthenticated);
    expect(wrong.rawMessage).toBe("enrollment token not valid");
  });

  it("lists tokens without their secrets, and a used token cannot be revoked", async () => {
    const t = await token({ nodeName: "listed" });
    await enrollRaw(t.token).call;
    const list = await ts.admin.listEnrollmentTokens({});
    const row = list.enrollmentTokens.find((x) => x.id === t.enrollmentToken!.id)!;
    expect(row.nodeName).toBe("listed");
    expect(JSON.stringify(toJson(ListEnrollmentTokensResponseSchema, list))).not.toContain(t.token);
    const err = await rejection(ts.admin.revokeEnrollmentToken({ id: row.id }));
    expect(err.code).toBe(Code.FailedPrecondition);
  });

  it("refuses a malformed CSR without burning the token", async () => {
    const t = await token();
    const err = await rejection(
      pinnedClient(ts.url, ts.caPem).enroll({
        token: t.token,
        csrPem: "-----BEGIN CERTIFICATE REQUEST-----\nxx\n-----END CERTIFICATE REQUEST-----\n",
      }),
    );
    expect(err.code).toBe(Code.InvalidArgument);
    await enrollRaw(t.token).call; // still usable
  });
});

describe("the agent pins the server's CA", () => {
  it("refuses a server whose CA does not match the fingerprint, and writes no state", async () => {
    const t = await token();
    const statePath = join(mkdtempSync(join(tmpdir(), "mf-pin-")), "state.json");
    const err = await enrollNode({ serverUrl: ts.url, token: t.token, caFingerprint: `sha256:${"0".repeat(64)}`, statePath }).then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(err).toBeInstanceOf(EnrollError);
    expect((err as Error).message).toMatch(/does not match the expected/);
    expect(existsSync(statePath)).toBe(false);
  });

  it("refuses to overwrite an existing identity unless forced", async () => {
    const node = await enrollTestNode(ts, "once");
    const t = await token();
    const again = enrollNode({ serverUrl: ts.url, token: t.token, caFingerprint: ts.server.ca.fingerprint, statePath: node.statePath });
    await expect(again).rejects.toThrow(/already exists/);
    expect((await node.state()).nodeId).toBe(node.nodeId);
  });
});

describe("every node call checks the certificate and the database", () => {
  let node: TestNode;
  beforeAll(async () => {
    node = await enrollTestNode(ts, "checked");
  });

  it("accepts the node's own certificate", async () => {
    const res = await (await node.client()).heartbeat({});
    expect(res.config?.heartbeatInterval).toBeDefined();
  });

  it("refuses a call without a client certificate", async () => {
    const err = await rejection(ts.anonymousAgent.heartbeat({}));
    expect(err.code).toBe(Code.Unauthenticated);
    expect(err.rawMessage).toBe("client certificate required");
  });

  it("refuses a certificate signed by another CA, even naming a real node", async () => {
    const otherCa = await loadOrCreateCa(mkdtempSync(join(tmpdir(), "mf-other-ca-")));
    const { keyPem, csrPem } = await generateNodeKeyAndCsr("forged");
    const forged = await otherCa.issueNodeCertificate(csrPem, node.nodeId, { validityMs: 3600_000 });
    const client = nodeClient({ serverUrl: ts.url, caPem: ts.caPem, certPem: forged.certPem, keyPem });
    const err = await rejection(client.heartbeat({}));
    expect(err.code).toBe(Code.Unauthenticated);
    expect(err.rawMessage).toMatch(/client certificate not accepted/);
  });

  it("refuses an expired certificate from our own CA", async () => {
    const { keyPem, csrPem } = await generateNodeKeyAndCsr("expired");
    const old = await ts.server.ca.issueNodeCertificate(csrPem, node.nodeId, { validityMs: 1000, now: new Date(Date.now() - 3600_000) });
    const client = nodeClient({ serverUrl: ts.url, caPem: ts.caPem, certPem: old.certPem, keyPem });
    const err = await rejection(client.heartbeat({}));
    expect(err.code).toBe(Code.Unauthenticated);
    expect(err.rawMessage).toMatch(/expired/i);
  });

  it("refuses a valid certificate from our CA whose serial was never recorded", async () => {
    const { keyPem, csrPem } = await generateNodeKeyAndCsr("unrecorded");
    const stray = await ts.server.ca.issueNodeCertificate(csrPem, node.nodeId, { validityMs: 3600_000 });
    const client = nodeClient({ serverUrl: ts.url, caPem: ts.caPem, certPem: stray.certPem, keyPem });
    expect((await rejection(client.heartbeat({}))).code).toBe(Code.Unauthenticated);
  });

  it("answers permission_denied while the node is disabled, and works again once enabled", async () => {
    await ts.admin.disableNode({ nodeId: node.nodeId, reason: "maintenance" });
    const err = await rejection((await node.client()).heartbeat({}));
    expect(err.code).toBe(Code.PermissionDenied);
    expect(err.rawMessage).toBe("node disabled: maintenance");
    await ts.admin.enableNode({ nodeId: node.nodeId });
    await (await node.client()).heartbeat({});
  });
});

describe("revocation", () => {
  it("closes an open stream within a second and refuses the credential from then on", async () => {
    const node = await enrollTestNode(ts, "revoked");
    const client = await node.client();
    const outbound = (async function* () {
      yield { messageId: 1n, message: { case: "hello" as const, value: { protocolVersion: 1, agentVersion: "test" } } };
      await new Promise(() => undefined); // keep the stream open
    })();
    const stream = client.session(outbound);
    const it = stream[Symbol.asyncIterator]();
    expect((await it.next()).value?.message.case).toBe("welcome");
    const started = Date.now();
    await ts.admin.revokeNodeCredential({ nodeId: node.nodeId, reason: "stolen laptop" });
    const end = await it.next().then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(Date.now() - started).toBeLessThan(1000);
    expect(end).toBeInstanceOf(ConnectError);
    expect((end as ConnectError).code).toBe(Code.Unauthenticated);
    expect((await rejection(client.heartbeat({}))).rawMessage).toBe("credential revoked");
    const audit = await ts.admin.listAuditEvents({ action: "credential.revoked" });
    expect(audit.events.some((e) => e.details.nodeId === node.nodeId && e.details.reason === "stolen laptop")).toBe(true);
  });

  it("closes a stream whose credential another replica revoked (seen only in the database)", async () => {
    const node = await enrollTestNode(ts, "revoked-elsewhere");
    const client = await node.client();
    const outbound = (async function* () {
      yield { messageId: 1n, message: { case: "hello" as const, value: { protocolVersion: 1, agentVersion: "test" } } };
      await new Promise(() => undefined);
    })();
    const it = client.session(outbound)[Symbol.asyncIterator]();
    expect((await it.next()).value?.message.case).toBe("welcome");
    // As another replica would: the row changes, this replica's registry is not told.
    await ts.server.db.prisma.nodeCredential.updateMany({
      where: { nodeId: node.nodeId },
      data: { revokedAt: new Date(), revokedReason: "elsewhere" },
    });
    const started = Date.now();
    const end = await it.next().then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(Date.now() - started).toBeLessThan(1000);
    expect((end as ConnectError).code).toBe(Code.Unauthenticated);
  });

  it("a recovery token revokes the node's credential at once and re-enrolls the same node id", async () => {
    const node = await enrollTestNode(ts, "recovered");
    const recovery = await token({ nodeId: node.nodeId });
    expect(await activeCredentials(node.nodeId)).toBe(0);
    expect((await rejection((await node.client()).heartbeat({}))).code).toBe(Code.Unauthenticated);
    const state = await enrollNode({
      serverUrl: ts.url,
      token: recovery.token,
      caFingerprint: ts.server.ca.fingerprint,
      statePath: node.statePath,
      force: true,
    });
    expect(state.nodeId).toBe(node.nodeId);
    expect(await activeCredentials(node.nodeId)).toBe(1);
    await nodeClient(state).heartbeat({});
  });
});

describe("renewal and rotation keep the node id and one active credential", () => {
  it("RenewCredential issues a new certificate and revokes the calling one in the same step", async () => {
    const node = await enrollTestNode(ts, "renewer");
    const oldClient = await node.client();
    const { keyPem, csrPem } = await generateNodeKeyAndCsr();
    const renewed = await oldClient.renewCredential({ csrPem });
    const fresh = nodeClient({ ...(await node.state()), certPem: renewed.certificatePem, keyPem });
    await fresh.heartbeat({});
    expect((await rejection(oldClient.heartbeat({}))).rawMessage).toBe("credential revoked");
    expect((await rejection(oldClient.renewCredential({ csrPem: (await generateNodeKeyAndCsr()).csrPem }))).code).toBe(
      Code.Unauthenticated,
    );
    expect(await activeCredentials(node.nodeId)).toBe(1);
  });

  it("a running agent renews by itself when its certificate nears expiry, once per certificate", async () => {
    // 20 s certificates (valid from a minute back, for clock skew: 80 s in all), renewed when 18 %
    // of that is left: about 5.6 s after each is issued, with 14 s to spare before it expires.
    const own = await startTestServer({
      MODELFORGE_CREDENTIAL_TTL: "20s",
      MODELFORGE_RENEW_REMAINING_FRACTION: "0.18",
      MODELFORGE_HEARTBEAT_INTERVAL: "200ms",
    });
    const node = await enrollTestNode(own, "expiring");
    const first = (await node.state()).certPem;
    const stop = new AbortController();
    const running = runAgent({ statePath: node.statePath, log: pino({ level: "silent" }), signal: stop.signal, backoffBaseMs: 50 });
    try {
      await eventually(async () => (await node.state()).certPem !== first, 30_000, "renewed certificate");
      const renewed = (await node.state()).certPem;
      await eventually(() => own.server.sessionsConnected(node.nodeId), 10_000, "session on the renewed certificate");
      // The renewed certificate is not due for seconds: the agent judges it by its own dates, not the first one's.
      const renewals = await own.server.db.prisma.nodeCredential.count({ where: { nodeId: node.nodeId } });
      expect(renewals).toBe(2);
      await eventually(async () => (await node.state()).certPem !== renewed, 30_000, "second renewal");
      expect((await node.state()).nodeId).toBe(node.nodeId);
      expect(await own.server.db.prisma.nodeCredential.count({ where: { nodeId: node.nodeId, revokedAt: null } })).toBe(1);
    } finally {
      stop.abort();
      await running;
      await own.stop();
    }
  });

  it("a running agent renews on the operator's rotation and carries on, same node id", async () => {
    const node = await enrollTestNode(ts, "rotated");
    const stop = new AbortController();
    const running = runAgent({ statePath: node.statePath, log: pino({ level: "silent" }), signal: stop.signal, backoffBaseMs: 50 });
    try {
      await eventually(() => ts.server.sessionsConnected(node.nodeId), 10_000, "agent session");
      const before = (await node.state()).certPem;
      const rotated = await ts.admin.rotateNodeCredential({ nodeId: node.nodeId });
      expect(rotated.delivered).toBe(true);
      await eventually(async () => (await node.state()).certPem !== before, 10_000, "renewed certificate");
      await eventually(() => ts.server.sessionsConnected(node.nodeId), 10_000, "session on the new certificate");
      const s = await node.state();
      expect(s.nodeId).toBe(node.nodeId);
      expect(await activeCredentials(node.nodeId)).toBe(1);
      expect(await ts.server.db.prisma.nodeCredential.count({ where: { nodeId: node.nodeId } })).toBe(2);
      const audit = await ts.admin.listAuditEvents({ targetId: node.nodeId });
      expect(audit.events.map((e) => e.action)).toEqual(
        expect.arrayContaining(["credential.rotation_requested", "credential.renewed", "node.enrolled"]),
      );
    } finally {
      stop.abort();
      await running;
    }
  });
});

describe("decommission", () => {
  it("previews, then refuses everything for that identity afterwards; the node stays listed", async () => {
    const node = await enrollTestNode(ts, "retired");
    const client = await node.client();
    const preview = await ts.admin.previewDecommission({ nodeId: node.nodeId });
    expect(preview.credentialSerials).toHaveLength(1);
    expect(await activeCredentials(node.nodeId)).toBe(1); // a preview changes nothing
    const done = await ts.admin.decommissionNode({ nodeId: node.nodeId, reason: "hardware retired" });
    expect(done.revokedSerials).toEqual(preview.credentialSerials);

    // Called one at a time: a rejection not yet awaited would be an unhandled one.
    for (const call of [
      () => client.heartbeat({}),
      () => client.putInventory({}),
      () => client.putTelemetry({}),
      async () => client.renewCredential({ csrPem: (await generateNodeKeyAndCsr()).csrPem }),
    ]) {
      expect((await rejection(call())).code).toBe(Code.Unauthenticated);
    }
    expect((await rejection(ts.admin.createEnrollmentToken({ nodeId: node.nodeId }))).code).toBe(Code.FailedPrecondition);
    expect((await rejection(ts.admin.rotateNodeCredential({ nodeId: node.nodeId }))).code).toBe(Code.FailedPrecondition);
    expect((await rejection(ts.admin.decommissionNode({ nodeId: node.nodeId }))).code).toBe(Code.FailedPrecondition);
    const renamed = await rejection(
      ts.admin.updateNode({ nodeId: node.nodeId, name: "reborn", labels: { a: "b" }, updateMask: { paths: ["name", "labels"] } }),
    );
    expect([renamed.code, renamed.rawMessage]).toEqual([Code.FailedPrecondition, `node ${node.nodeId} is decommissioned`]);
    const got = await ts.admin.getNode({ nodeId: node.nodeId });
    expect(got.node?.name).toBe("retired");
    expect(got.node?.decommissionedAt).toBeDefined();
    expect(got.node?.liveness).toBe(6); // LIVENESS_DECOMMISSIONED
  });

  it("answers not_found for an unknown node and invalid_argument for a malformed id", async () => {
    expect((await rejection(ts.admin.getNode({ nodeId: "00000000-0000-4000-8000-000000000000" }))).code).toBe(Code.NotFound);
    expect((await rejection(ts.admin.disableNode({ nodeId: "nope" }))).code).toBe(Code.InvalidArgument);
  });
});

it("keeps state files private", async () => {
  const node = await enrollTestNode(ts, "private");
  const { statSync } = await import("node:fs");
  expect(statSync(node.statePath).mode & 0o777).toBe(0o600);
  expect((await readState(node.statePath))?.nodeId).toBe(node.nodeId);
});

describe("token lifetime", () => {
  it("accepts a token until its ttl has passed by the server's clock, and refuses it after", async () => {
    const clock = new ManualClock();
    const clocked = await startTestServer({}, { clock });
    try {
      const ttl = { ttl: durationFromMs(60_000), nodeName: "", nodeId: "" };
      const early = await clocked.admin.createEnrollmentToken(ttl);
      const late = await clocked.admin.createEnrollmentToken(ttl);
      clock.advance(59_999);
      expect((await enrollRaw(early.token, clocked).call).nodeId).toMatch(/^[0-9a-f-]{36}$/);
      clock.advance(1);
      const e = await rejection(enrollRaw(late.token, clocked).call);
      expect(e.code).toBe(Code.Unauthenticated);
      expect(e.rawMessage).toBe("enrollment token expired");
    } finally {
      await clocked.stop();
    }
  });
});

describe("automatic renewal", () => {
  let short: TestServer;
  beforeAll(async () => {
    // Certificates are backdated 60 s for clock skew: a 10 h certificate lives 10 h 1 min, and
    // with a 0.1 share it is due for renewal 1 h 1 s before it expires.
    short = await startTestServer({
      MODELFORGE_CREDENTIAL_TTL: "10h",
      MODELFORGE_RENEW_REMAINING_FRACTION: "0.1",
      MODELFORGE_HEARTBEAT_INTERVAL: "200ms",
    });
  });
  afterAll(() => short?.stop());

  it("renews on its own when the configured share of the lifetime remains, keeping one active credential", async () => {
    const node = await enrollTestNode(short, "self-renewing");
    const first = (await node.state()).certPem;
    const clock = new ManualClock();
    const stop = new AbortController();
    const running = runAgent({ statePath: node.statePath, log: pino({ level: "silent" }), signal: stop.signal, backoffBaseMs: 50, clock });
    try {
      await eventually(() => short.server.sessionsConnected(node.nodeId), 10_000, "session");
      // Heartbeats (each checks renewal) go on while the agent's clock says 8 h 59 min have passed.
      clock.advance(9 * 3600_000 - 60_000);
      // Three heartbeats answered after the advance: the agent has checked renewal since.
      const lastHeartbeat = async () => {
        const at = (await short.admin.getNode({ nodeId: node.nodeId })).node!.lastHeartbeatAt;
        return at === undefined ? 0 : timestampMs(at);
      };
      for (let i = 0; i < 3; i++) {
        const seen = await lastHeartbeat();
        await eventually(async () => (await lastHeartbeat()) !== seen, 10_000, "a heartbeat after the advance");
      }
      expect((await node.state()).certPem).toBe(first);
      clock.advance(2 * 60_000); // 9 h 1 min: due
      await eventually(async () => (await node.state()).certPem !== first, 10_000, "self-renewal");
      await eventually(() => short.server.sessionsConnected(node.nodeId), 10_000, "session after renewal");
      expect((await node.state()).nodeId).toBe(node.nodeId);
      const active = await short.server.db.prisma.nodeCredential.count({ where: { nodeId: node.nodeId, revokedAt: null } });
      expect(active).toBe(1);
    } finally {
      stop.abort();
      await running;
    }
  });
});

describe("node metadata", () => {
  it("updates name and labels by field mask, and lists nodes by label", async () => {
    const a = await enrollTestNode(ts, "labelled-a");
    const b = await enrollTestNode(ts, "labelled-b");
    await ts.admin.updateNode({ nodeId: a.nodeId, labels: { pool: "h100", zone: "eu-1" }, updateMask: { paths: ["labels"] } });
    await ts.admin.updateNode({ nodeId: b.nodeId, name: "renamed-b", labels: { pool: "a100" }, updateMask: { paths: ["name", "labels"] } });
    const h100 = await ts.admin.listNodes({ labels: { pool: "h100" } });
    expect(h100.nodes.map((n) => n.id)).toEqual([a.nodeId]);
    expect((await ts.admin.getNode({ nodeId: b.nodeId })).node?.name).toBe("renamed-b");
    expect((await rejection(ts.admin.updateNode({ nodeId: a.nodeId, updateMask: { paths: ["liveness"] } }))).code).toBe(
      Code.InvalidArgument,
    );
    expect(
      (await rejection(ts.admin.updateNode({ nodeId: a.nodeId, labels: { "bad key!": "x" }, updateMask: { paths: ["labels"] } }))).code,
    ).toBe(Code.InvalidArgument);
  });

  it("pages audit events newest first", async () => {
    const first = await ts.admin.listAuditEvents({ pageSize: 2 });
    expect(first.events).toHaveLength(2);
    expect(first.nextPageToken).not.toBe("");
    const second = await ts.admin.listAuditEvents({ pageSize: 2, pageToken: first.nextPageToken });
    expect(second.events[0]!.id).not.toBe(first.events[1]!.id);
    expect(second.events[0]!.time!.seconds <= first.events[1]!.time!.seconds).toBe(true);
  });
});

describe("WatchNodes", () => {
  it("sends the current nodes, then each change", async () => {
    const node = await enrollTestNode(ts, "watched");
    const abort = new AbortController();
    const stream = ts.admin.watchNodes({}, { signal: abort.signal })[Symbol.asyncIterator]();
    try {
      const seen = new Set<string>();
      while (!seen.has(node.nodeId)) seen.add((await stream.next()).value!.node!.id);
      await ts.admin.disableNode({ nodeId: node.nodeId, reason: "watch me" });
      for (;;) {
        const n = (await stream.next()).value!.node!;
        if (n.id === node.nodeId) {
          expect(n.liveness).toBe(5); // LIVENESS_DISABLED
          expect(n.disabledReason).toBe("watch me");
          break;
        }
      }
    } finally {
      abort.abort();
    }
  });
});
