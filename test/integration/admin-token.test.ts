// The admin token over the real server: a key with surrounding whitespace (pasted from a file or a
// terminal) is refused as an invalid token, not as a header the caller never sent. Connect clients
// trim header values themselves; curl and plain HTTP/2 clients send them as given, and HTTP/2 then
// drops the whole header (RFC 9113 forbids the whitespace), so the server never sees it.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type http2 from "node:http2";
import { startTestServer, testAdminKey, type TestServer } from "../support/server.js";
import { call, connect, emptyJson } from "../support/raw-call.js";

const listNodes = "/modelforge.admin.v1.AdminService/ListNodes";
let ts: TestServer;
let session: http2.ClientHttp2Session;
beforeAll(async () => {
  ts = await startTestServer();
  session = await connect(ts.url, ts.caPem);
});
afterAll(async () => {
  session.destroy();
  await ts.stop();
});

const listNodesWith = (key: string | undefined) =>
  call(session, listNodes, "application/json", emptyJson, key === undefined ? {} : { "x-modelforge-admin-token": key });

describe("admin token", () => {
  it.each([
    ["a trailing space", `${testAdminKey} `],
    ["a leading space", ` ${testAdminKey}`],
    ["a tab on each side", `\t${testAdminKey}\t`],
  ])("a key with %s is refused as invalid, saying why it may not have arrived", async (_name, key) => {
    const answer = await listNodesWith(key);
    expect(answer.code).toBe("unauthenticated");
    expect(answer.message).toMatch(/^invalid admin token/);
    expect(answer.message).toMatch(/whitespace/);
  });

  it("a wrong key is refused as invalid, no key as missing, the key is accepted", async () => {
    expect((await listNodesWith("wrong-key-0123456789")).message).toBe("invalid admin token");
    expect((await listNodesWith(undefined)).message).toMatch(/missing/);
    expect((await listNodesWith(testAdminKey)).code).toBe("ok");
  });

  it("never logs the key", () => {
    expect(ts.logs()).not.toContain(testAdminKey);
  });
});
