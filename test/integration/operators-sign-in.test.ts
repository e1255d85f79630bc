// Signing in as a person (issue #52), end to end against a real OpenID Provider on loopback
// (test/support/oidc.ts): the web console in Chromium (redirect, the provider's login form, the
// callback with PKCE, state and nonce, a session cookie, a page that names the user, sign-out),
// and `forge login` through the device grant, with the test in the user's place at the provider's
// verification page; the CLI's stored token (mode 0600), its refresh, personal tokens and logout.
import { readFileSync, statSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { PassThrough, Writable } from "node:stream";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { Agent, fetch as undiciFetch } from "undici";
import { runCli } from "../../cli/cli.js";
import type { ConsoleBrowser } from "../support/browser.js";
import { signInAtProvider, type TestProvider } from "../support/oidc.js";
import { bearerClient, startSignInStack, type SignInStack } from "../support/operators.js";
import { testAdminKey, type TestServer } from "../support/server.js";
import { TextFeed, waitFor } from "../support/wait.js";

/** forge in this process, its stderr into `stderr` as it comes (a prompt is awaited there). */
async function runForge(args: string[], env: Record<string, string>, stderr = new TextFeed()) {
  let out = "";
  const sink = (write: (text: string) => void) =>
    new Writable({
      write(chunk: Buffer, _enc, cb) {
        write(chunk.toString());
        cb();
      },
    });
  const stdin = new PassThrough();
  stdin.end();
  const io = { stdout: sink((t) => (out += t)), stderr: sink((t) => stderr.append(t)), stdin, env, signal: new AbortController().signal };
  const code = await runCli(args, io);
  return { code, out, err: stderr.toString() };
}

describe("signing in as a person", () => {
  let stack: SignInStack;
  let provider: TestProvider;
  let ts: TestServer;
  let web: ConsoleBrowser;
  let dir: string;

  beforeAll(async () => {
    stack = await startSignInStack("sign-in", { console: true });
    ({ provider, ts, web, dir } = stack);
  });
  afterAll(() => stack?.stop());

  it("the console: to the provider and back, a session cookie, and a page that names the user", async () => {
    await web.page.goto(`${ts.url}/ui/`);
    await web.page.getByTestId("sso").click();
    await signInAtProvider(web.page, "alice");
    await web.page.getByTestId("user").waitFor();
    expect(await web.text("user")).toBe("Alice Admin");
    expect(await web.text("role")).toBe("admin");
    await web.shot("signed-in");
    const [cookie] = (await web.context.cookies(ts.url)).filter((c) => c.name === "__Host-modelforge-session");
    expect(cookie).toMatchObject({ httpOnly: true, secure: true, sameSite: "Strict", path: "/" });
    // Bounded: the server's default console session is 8 hours.
    expect(cookie!.expires * 1000 - Date.now()).toBeGreaterThan(7.9 * 3_600_000);
    expect(cookie!.expires * 1000 - Date.now()).toBeLessThan(8.1 * 3_600_000);
    // The login cookie (state, nonce, PKCE verifier) is gone once used.
    expect((await web.context.cookies(ts.url)).map((c) => c.name)).not.toContain("__Host-modelforge-login");

    // A service key she makes is hers, and the keys page says so.
    await bearerClient(ts.url, ts.caPem, await provider.mint("alice")).createServiceKey({ name: "alices", deployments: ["chat"] });
    await web.page.goto(`${ts.url}/ui/#/keys`);
    await web.page.getByTestId("owner-alices").waitFor();
    expect(await web.text("owner-alices")).toBe("alice@example.com");

    // What she does is hers in the audit, and the audit page filters by her.
    await web.page.goto(`${ts.url}/ui/#/audit?actor=alice@example.com`);
    await web.until(
      "alice's sign-in in the audit",
      async () => (await web.page.getByTestId("audit").textContent())?.includes("user.created") ?? false,
    );
    expect(await web.page.getByTestId("audit").textContent()).toContain("alice@example.com");

    // What a cross-site page could make a browser send with the cookie is refused: a form's
    // content type, or any request from another origin.
    const formPost = await web.page.evaluate(async () => {
      const res = await fetch("/modelforge.admin.v1.AdminService/ListUsers", {
        method: "POST",
        headers: { "content-type": "text/plain" },
        body: "{}",
      });
      return res.status;
    });
    expect([401, 415]).toContain(formPost);
    const dispatcher = new Agent({ connect: { ca: ts.caPem } });
    const crossSite = await undiciFetch(`${ts.url}/modelforge.admin.v1.AdminService/ListUsers`, {
      method: "POST",
      headers: { "content-type": "application/json", origin: "https://evil.example", cookie: `__Host-modelforge-session=${cookie!.value}` },
      body: "{}",
      dispatcher,
    });
    expect(crossSite.status).toBe(401);
    expect(await crossSite.text()).toMatch(/a cross-site request/);

    await web.page.getByRole("button", { name: "Sign out" }).click();
    await web.page.getByTestId("sso").waitFor();
    expect(await web.text("sso")).toBe("Sign in with single sign-on");
    // The session ended at the server too: the old cookie, sent again, is refused.
    const replay = await undiciFetch(`${ts.url}/modelforge.admin.v1.AdminService/GetOperatorRole`, {
      method: "POST",
      headers: { "content-type": "application/json", cookie: `__Host-modelforge-session=${cookie!.value}` },
      body: "{}",
      dispatcher,
    });
    expect(replay.status).toBe(401);
    expect(await replay.text()).toMatch(/console session ended/);
  });

  describe("forge", () => {
    const loginFile = () => join(dir, "config", "login.json");
    const forge = (args: string[], extraEnv: Record<string, string> = {}, stderr = new TextFeed()) =>
      runForge(
        args,
        { MODELFORGE_SERVER: ts.url, MODELFORGE_CA_FILE: join(dir, "ca.crt"), MODELFORGE_LOGIN_FILE: loginFile(), ...extraEnv },
        stderr,
      );

    it("login through the device grant, driven at the provider's page; the token kept 0600 and refreshed", async () => {
      const prompts = new TextFeed();
      const login = forge(["login"], {}, prompts);
      const url = await waitFor(() => /open (http\S+)/.exec(prompts.toString())?.[1], {
        what: "forge login to show the verification address",
      });
      expect(prompts.toString()).toMatch(/confirm the code [A-Z]{4}-[A-Z]{4}/);
      // Someone else's browser: no session at the provider yet.
      await web.context.clearCookies();
      await web.page.goto(url);
      await web.page.getByRole("button", { name: "Continue" }).click();
      await signInAtProvider(web.page, "oscar");
      // The provider asks its user to authorize a native client (the CLI) every time.
      await web.page.getByRole("button", { name: "Continue" }).click();
      await web.page.getByText("Sign-in Success").waitFor();
      const done = await login;
      expect(done.code, done.err).toBe(0);
      expect(done.out).toMatch(/User:\s+Oscar Operator <oscar@example\.com>/);
      expect(done.out).toMatch(/Role:\s+operator/);
      expect(statSync(loginFile()).mode & 0o777).toBe(0o600);
      expect(statSync(join(dir, "config")).mode & 0o777).toBe(0o700);

      // A token about to expire is refreshed before the call, and the new one kept.
      const stored = JSON.parse(readFileSync(loginFile(), "utf8")) as { logins: Record<string, { idToken: string; expiresAt: number }> };
      stored.logins[ts.url]!.expiresAt = Date.now();
      writeFileSync(loginFile(), JSON.stringify(stored), { mode: 0o600 });
      const again = await forge(["whoami"]);
      expect(again.code, again.err).toBe(0);
      expect(again.out).toMatch(/Signed in with:\s+oidc/);
      // Only a refresh writes a later expiry than the one set above.
      const after = (JSON.parse(readFileSync(loginFile(), "utf8")) as typeof stored).logins[ts.url]!;
      expect(after.expiresAt).toBeGreaterThan(Date.now() + 60_000);
      expect(after.idToken.split(".")).toHaveLength(3);
    });

    it("makes a personal token, which scripts use; lists and revokes it", async () => {
      const made = await forge(["tokens", "personal", "create", "--name", "ci", "--ttl", "30d", "--role", "viewer"]);
      expect(made.code, made.err).toBe(0);
      const token = /(mfpt_[A-Za-z0-9_-]{43})/.exec(made.out)?.[1];
      expect(token).toBeDefined();
      const asScript = await forge(["whoami"], { MODELFORGE_TOKEN: token!, MODELFORGE_LOGIN_FILE: join(dir, "none.json") });
      expect(asScript.out).toMatch(/Role:\s+viewer/);
      expect(asScript.out).toMatch(/Signed in with:\s+personal-token:ci/);
      const refused = await forge(["service-keys", "create", "--name", "x", "--deployment", "y"], { MODELFORGE_TOKEN: token! });
      expect(refused.code).toBe(1);
      expect(refused.err).toMatch(/permission_denied/);
      expect(refused.err).not.toContain(token!);
      const listed = await forge(["tokens", "personal", "list"]);
      expect(listed.out).toMatch(/ci\s+active\s+viewer/);
      const id = /^([0-9a-f-]{36})\s+ci/m.exec(listed.out)?.[1];
      expect((await forge(["tokens", "personal", "revoke", id!])).code).toBe(0);
      expect((await forge(["whoami"], { MODELFORGE_TOKEN: token! })).err).toMatch(/invalid personal token: revoked/);
      expect((await forge(["tokens", "personal", "create", "--name", "up", "--role", "admin"])).err).toMatch(
        /an operator cannot make a token with the admin role/,
      );

      // An operator's token does an operator's work, in its user's name and its own.
      const deploy = /(mfpt_[A-Za-z0-9_-]{43})/.exec((await forge(["tokens", "personal", "create", "--name", "deploy"])).out)![1]!;
      const made2 = await forge(["service-keys", "create", "--name", "from-ci", "--deployment", "chat"], { MODELFORGE_TOKEN: deploy });
      expect(made2.code, made2.err).toBe(0);
      // ... but cannot make another token.
      expect((await forge(["tokens", "personal", "create", "--name", "more"], { MODELFORGE_TOKEN: deploy })).err).toMatch(
        /a personal token cannot make another/,
      );
    });

    it("lists users as an admin, and names the actor in the audit", async () => {
      const users = await forge(["users", "list"], { MODELFORGE_OPERATOR_API_KEY: testAdminKey });
      expect(users.out).toMatch(/oscar@example\.com\s+Oscar Operator\s+operator\s+active/);
      const audit = await forge(["audit", "list", "--actor", "oscar@example.com"], { MODELFORGE_OPERATOR_API_KEY: testAdminKey });
      expect(audit.out).toMatch(/user:[0-9a-f-]{36} \(oscar@example\.com\)\s+personal_token\.revoked/);
      expect(audit.out).toMatch(/user:[0-9a-f-]{36} \(oscar@example\.com token:deploy\)\s+service_key\.created/);
      const keys = await forge(["service-keys", "list", "--owner", "oscar@example.com"], { MODELFORGE_OPERATOR_API_KEY: testAdminKey });
      expect(keys.out).toMatch(/from-ci\s.*oscar@example\.com/);
    });

    it("logout revokes the refresh token at the provider and forgets the sign-in", async () => {
      const out = await forge(["logout"]);
      expect(out.out).toMatch(/Signed out of .* \(refresh token revoked\)/);
      expect(() => statSync(loginFile())).toThrow(/ENOENT/);
      const after = await forge(["whoami"]);
      expect(after.code).toBe(2);
      expect(after.err).toMatch(/not signed in to .*: run forge login/);
    });

    it("never logs a token, code or secret", () => {
      expect(ts.logs()).not.toMatch(/mfpt_[A-Za-z0-9_-]{43}/);
      expect(ts.logs()).not.toMatch(/eyJ[A-Za-z0-9_-]{10,}\./);
      expect(ts.logs()).not.toContain(provider.consoleClient.secret);
      expect(ts.logs()).not.toMatch(/[?&]code=/);
    });
  });
});

describe("forge login where the provider has no device grant", () => {
  let stack: SignInStack;
  let ts: TestServer;
  let web: ConsoleBrowser;
  let dir: string;

  beforeAll(async () => {
    stack = await startSignInStack("sign-in-loopback", { deviceFlow: false });
    ({ ts, web, dir } = stack);
  });
  afterAll(() => stack?.stop());

  it("signs in through a redirect to a loopback port, with PKCE, state and nonce", async () => {
    const prompts = new TextFeed();
    const env = { MODELFORGE_SERVER: ts.url, MODELFORGE_CA_FILE: join(dir, "ca.crt"), MODELFORGE_LOGIN_FILE: join(dir, "login.json") };
    const login = runForge(["login"], env, prompts);
    const url = new URL(
      await waitFor(() => /open (http\S+)/.exec(prompts.toString())?.[1], { what: "forge login to show the address to open" }),
    );
    expect(url.searchParams.get("code_challenge_method")).toBe("S256");
    expect(url.searchParams.get("redirect_uri")).toMatch(/^http:\/\/127\.0\.0\.1:\d+\/callback$/);
    expect(url.searchParams.get("state")).not.toBeNull();
    expect(url.searchParams.get("nonce")).not.toBeNull();
    await web.page.goto(url.href);
    await signInAtProvider(web.page, "vera");
    await web.page.getByRole("button", { name: "Continue" }).click();
    await web.page.getByText("Signed in: you can close this window").waitFor();
    const done = await login;
    expect(done.code, done.err).toBe(0);
    expect(done.out).toMatch(/User:\s+Vera Viewer <vera@example\.com>/);
    expect(statSync(join(dir, "login.json")).mode & 0o777).toBe(0o600);
  });
});
