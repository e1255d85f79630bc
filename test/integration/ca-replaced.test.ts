// An agent whose control plane got a new CA with the same name as the old one (a regenerated certs
// directory): the TLS handshake fails before any RPC. The server logs who gave up and why (warn,
// flood-proof); the agent, after a few such failures, says its credential is no longer accepted
// and how to recover. Real servers on loopback, the real agent loop in-process.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { X509Certificate } from "node:crypto";
import { Code, ConnectError } from "@connectrpc/connect";
import { readState, writeState } from "../../agent/state.js";
import { CredentialRefusals, credentialRefusalOf, refusalAdvice } from "../../agent/session/credential-refusal.js";
import { judgeHandshakeFailure, NOT_TRUSTED } from "../../server/observability/tls-handshake.js";
import { startTestServer, type TestServer } from "../support/server.js";
import { enrollTestNode, eventually, type TestNode } from "../support/node.js";
import { startAgent, type InProcessAgent } from "../support/agent.js";

const tlsError = (code: string) => Object.assign(new Error(code), { code });
const wrapped = (code: string) => new ConnectError("transport failed", Code.Internal, undefined, undefined, tlsError(code));

describe("credential refusals on the agent", () => {
  it.each([
    [
      "a pinned CA that no longer verifies the server",
      wrapped("SELF_SIGNED_CERT_IN_CHAIN"),
      { kind: "server-untrusted", reason: "SELF_SIGNED_CERT_IN_CHAIN" },
    ],
    [
      "a bad signature on the server's chain",
      wrapped("CERT_SIGNATURE_FAILURE"),
      { kind: "server-untrusted", reason: "CERT_SIGNATURE_FAILURE" },
    ],
    [
      "the server refusing the certificate",
      new ConnectError("client certificate not accepted: UNABLE_TO_VERIFY_LEAF_SIGNATURE", Code.Unauthenticated),
      { kind: "credential-refused", reason: "client certificate not accepted: UNABLE_TO_VERIFY_LEAF_SIGNATURE" },
    ],
    ["a server that is down", wrapped("ECONNREFUSED"), undefined],
    ["an unavailable server", new ConnectError("database not ready", Code.Unavailable), undefined],
    ["a wrong server name (configuration, not the credential)", wrapped("ERR_TLS_CERT_ALTNAME_INVALID"), undefined],
  ])("classifies %s", (_what, err, want) => {
    expect(credentialRefusalOf(err)).toEqual(want);
  });

  it("advises after three TLS refusals in a row, at once for an explicit refusal, then at most every ten minutes", () => {
    const r = new CredentialRefusals({ untrustedAfter: 3, repeatMs: 600_000 });
    const untrusted = wrapped("SELF_SIGNED_CERT_IN_CHAIN");
    expect(r.failed(untrusted, 0)).toBeUndefined();
    expect(r.failed(wrapped("ECONNREFUSED"), 1)).toBeUndefined(); // the run is broken
    expect(r.failed(untrusted, 2)).toBeUndefined();
    expect(r.failed(untrusted, 3)).toBeUndefined();
    expect(r.failed(untrusted, 4)?.kind).toBe("server-untrusted");
    expect(r.failed(untrusted, 5)).toBeUndefined(); // said already
    expect(r.failed(untrusted, 600_004)?.kind).toBe("server-untrusted");
    r.accepted();
    expect(r.failed(new ConnectError("credential revoked", Code.Unauthenticated), 600_005)?.kind).toBe("credential-refused");
  });

  it("says how to recover, naming the node and the real commands", () => {
    const text = refusalAdvice({ kind: "server-untrusted", reason: "SELF_SIGNED_CERT_IN_CHAIN" }, "n-1");
    expect(text).toContain("npm run forge -- tokens create --node n-1");
    expect(text).toContain("npm run agent -- enroll --force");
  });
});

describe("failed handshakes on the server", () => {
  it.each([
    [{ code: "ECONNRESET", bytesRead: 0 }, "debug"],
    [{ code: "ECONNRESET", bytesRead: 358 }, "warn"],
    [{ code: "ERR_SSL_TLSV1_ALERT_UNKNOWN_CA", bytesRead: 300 }, "warn"],
    [{ code: "ERR_SSL_SSLV3_ALERT_BAD_CERTIFICATE", bytesRead: 300 }, "warn"],
    [{ code: "ERR_SSL_HTTP_REQUEST", bytesRead: 18 }, "debug"],
    [{ code: "ERR_SSL_WRONG_VERSION_NUMBER", bytesRead: 5 }, "debug"],
  ])("%o is logged at %s", (failure, level) => {
    expect(judgeHandshakeFailure(failure).level).toBe(level);
  });
});

describe("an agent after its control plane's CA was replaced", () => {
  let before: TestServer; // where the node enrolled
  let after: TestServer; // the same control plane with a new CA of the same name
  let node: TestNode;
  let agent: InProcessAgent | undefined;
  beforeAll(async () => {
    [before, after] = await Promise.all([startTestServer(), startTestServer()]);
    node = await enrollTestNode(before, "orphan");
    expect(new X509Certificate(after.caPem).subject).toBe(new X509Certificate(before.caPem).subject);
  });
  afterAll(async () => {
    await agent?.stop();
    await Promise.all([before?.stop(), after?.stop()]);
  });

  const sessionFailures = () =>
    agent!
      .logs()
      .split("\n")
      .filter((l) => l.includes('"session failed"')).length;

  it("is told by the server log who gave up and why, and tells its operator how to recover", async () => {
    const state = (await readState(node.statePath))!;
    await writeState(node.statePath, { ...state, serverUrl: after.url });
    agent = await startAgent(node);

    const advice = await eventually(
      () =>
        agent!
          .logs()
          .split("\n")
          .find((l) => l.includes("no longer verifies against the CA pinned")),
      20_000,
      "the agent's advice",
    );
    expect(JSON.parse(advice)).toMatchObject({ level: 50, nodeId: node.nodeId, reason: "SELF_SIGNED_CERT_IN_CHAIN" });
    expect(advice).toContain(`tokens create --node ${node.nodeId}`);
    expect(sessionFailures()).toBeGreaterThanOrEqual(3);

    const warned = await eventually(
      () =>
        after
          .logs()
          .split("\n")
          .find((l) => l.includes('"TLS handshake failed"') && l.includes('"level":40')),
      10_000,
      "the server's warn line",
    );
    expect(JSON.parse(warned)).toMatchObject({ peer: "127.0.0.1", code: "ECONNRESET", reason: NOT_TRUSTED });

    // It keeps trying (the old CA may come back), and neither log grows a line per attempt.
    await eventually(() => sessionFailures() >= 30, 30_000, "many more attempts");
    const warnLines = after
      .logs()
      .split("\n")
      .filter((l) => l.includes('"TLS handshake failed"') && l.includes('"level":40') && !l.includes("summary"));
    expect(warnLines.length).toBeLessThanOrEqual(5 * 3); // five per ten-second window
    expect(
      agent
        .logs()
        .split("\n")
        .filter((l) => l.includes("no longer verifies")).length,
    ).toBe(1);
    await agent.stop();
    agent = undefined;
  }, 90_000);

  it("is refused with unauthenticated when it trusts the new CA but holds the old certificate, and says so at once", async () => {
    const state = (await readState(node.statePath))!;
    await writeState(node.statePath, { ...state, serverUrl: after.url, caPem: after.caPem });
    agent = await startAgent(node);
    const advice = await eventually(
      () =>
        agent!
          .logs()
          .split("\n")
          .find((l) => l.includes("no longer accepts this node's credential")),
      20_000,
      "the agent's advice",
    );
    expect(JSON.parse(advice)).toMatchObject({ level: 50, reason: expect.stringMatching(/^client certificate not accepted: /) });
    expect(after.logs()).toMatch(/"code":"unauthenticated","message":"client certificate not accepted: /);
  }, 60_000);
});
