// A deactivated user on two control planes sharing one PostgreSQL database (issue #52): their web
// console session (signed in through the real provider in Chromium, on plane A), their personal
// token and their provider ID token all work on both planes; an admin deactivates them through
// plane A, and within a second every one of those credentials is refused on both planes, and their
// open stream on plane B is ended by the cluster bus. PostgreSQL only: replicas need it.
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { Code, ConnectError, type Client } from "@connectrpc/connect";
import type { AdminService } from "../../gen/proto/modelforge/admin/v1/admin_pb.js";
import { openConsoleBrowser, requireChromium, type ConsoleBrowser } from "../support/browser.js";
import { createTestDatabase, testBackend, type TestDatabase } from "../support/db.js";
import { signInAtProvider, startOidcProvider, type TestProvider } from "../support/oidc.js";
import { bearerClient, sessionClient, ssoEnv, testUsers } from "../support/operators.js";
import { startTwoPlanes, type TestServer } from "../support/server.js";
import { waitFor } from "../support/wait.js";

const codeOf = (p: Promise<unknown>) =>
  p.then(
    () => "ok" as const,
    (e: unknown) => ConnectError.from(e).code,
  );

describe.skipIf(testBackend() !== "postgres")("deactivating a user on two control planes", () => {
  let db: TestDatabase;
  let provider: TestProvider;
  let a: TestServer;
  let b: TestServer;
  let root: string;
  let web: ConsoleBrowser;

  beforeAll(async () => {
    requireChromium();
    root = mkdtempSync(join(tmpdir(), "mf-operators-planes-"));
    db = await createTestDatabase("postgres");
    provider = await startOidcProvider({ consoleRedirectUri: () => `${a.url}/auth/callback`, users: testUsers });
    [a, b] = await startTwoPlanes(db.databaseUrl!, root, ssoEnv(provider));
    web = await openConsoleBrowser(a.url, root, "operators-two-planes");
  }, 180_000);
  afterAll(async () => {
    await web?.close();
    await b?.stop();
    await a?.stop();
    await provider?.stop();
    await db?.cleanup();
    if (root) rmSync(root, { recursive: true, force: true });
  });

  it("refuses their console session, personal token and ID token on both planes within a second, and ends their stream", async () => {
    // The console's sign-in on plane A, through the provider's login form.
    await web.page.goto(`${a.url}/auth/login`);
    await signInAtProvider(web.page, "oscar");
    const session = await waitFor(
      async () => (await web.context.cookies(a.url)).find((c) => c.name === "__Host-modelforge-session")?.value,
      { what: "the console session cookie" },
    );
    const idToken = await provider.mint("oscar");
    const pat = (await bearerClient(a.url, a.caPem, idToken).createPersonalToken({ name: "ci" })).token;
    const credentials = (server: TestServer): [string, Client<typeof AdminService>][] => [
      ["console session", sessionClient(server.url, server.caPem, session)],
      ["personal token", bearerClient(server.url, server.caPem, pat)],
      ["ID token", bearerClient(server.url, server.caPem, idToken)],
    ];
    for (const server of [a, b]) {
      for (const [what, client] of credentials(server)) expect(await codeOf(client.listNodes({})), `${what} before`).toBe("ok");
    }
    // A stream of theirs held by plane B.
    const watch = (async () => {
      for await (const _ of bearerClient(b.url, b.caPem, idToken).watchNodes({})) {
        // An empty fleet sends nothing.
      }
    })().then(
      () => "ended" as const,
      (e: unknown) => ConnectError.from(e).code,
    );
    await waitFor(() => b.server.operatorStreams() > 0, { what: "oscar's watch open on plane B" });

    const alice = bearerClient(a.url, a.caPem, await provider.mint("alice"));
    const oscarId = (await alice.listUsers({})).users.find((u) => u.email === "oscar@example.com")!.id;
    const started = performance.now();
    await alice.deactivateUser({ id: oscarId });
    const refusedEverywhere = await waitFor(
      async () => {
        for (const server of [a, b]) {
          for (const [, client] of credentials(server)) if ((await codeOf(client.listNodes({}))) !== Code.Unauthenticated) return undefined;
        }
        return performance.now() - started;
      },
      { what: "every credential of oscar refused on both planes", interval: 20 },
    );
    expect(refusedEverywhere).toBeLessThan(1_000);
    expect(typeof (await watch)).toBe("number");
    expect(b.server.operatorStreams()).toBe(0);
  });
});
