// Operators as users (issue #52), over the real TLS server with a real OpenID Provider on loopback
// (test/support/oidc.ts): ID tokens verified against the provider's published keys, users made at
// first sign-in with the role their groups map to, every role checked method by method, personal
// tokens, service key owners, an audit that names the user, deactivation at once (streams too),
// and the break-glass keys audited as such. The console's sign-in and `forge login` are in
// operators-sign-in.test.ts; two control planes in test/database/operators-two-planes.test.ts.
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { Agent, fetch as undiciFetch } from "undici";
import type { DescMethod } from "@bufbuild/protobuf";
import { durationFromMs } from "@bufbuild/protobuf/wkt";
import { Code, ConnectError, type Client } from "@connectrpc/connect";
import { AdminService, OperatorRole } from "../../gen/proto/modelforge/admin/v1/admin_pb.js";
import { EngineKind } from "../../gen/proto/modelforge/jobs/v1/jobs_pb.js";
import { accessTable, mayCall } from "../../server/identity/roles.js";
import type { OperatorRole as Role } from "../../server/operator-roles.js";
import { loadConfig } from "../../server/config.js";
import { startOidcProvider, type TestProvider } from "../support/oidc.js";
import { bearerClient, callEmpty, ssoEnv, testUsers } from "../support/operators.js";
import { startTestServer, testAdminKey, type TestServer } from "../support/server.js";
import { waitFor } from "../support/wait.js";

const table = accessTable(AdminService);
const codeOf = (p: Promise<unknown>) =>
  p.then(
    () => "ok" as const,
    (e: unknown) => ConnectError.from(e).code,
  );
const messageOf = (p: Promise<unknown>) =>
  p.then(
    () => "ok",
    (e: unknown) => ConnectError.from(e).rawMessage,
  );

describe("operators signed in through an OpenID provider", () => {
  let provider: TestProvider;
  let ts: TestServer;
  const secrets: string[] = [];
  const as = async (login: string, overrides: Record<string, unknown> = {}) => {
    const token = await provider.mint(login, overrides);
    secrets.push(token);
    return bearerClient(ts.url, ts.caPem, token);
  };
  let alice: Client<typeof AdminService>;
  let oscar: Client<typeof AdminService>;
  let vera: Client<typeof AdminService>;

  beforeAll(async () => {
    provider = await startOidcProvider({ consoleRedirectUri: () => `${ts.url}/auth/callback`, users: testUsers });
    ts = await startTestServer(ssoEnv(provider));
    [alice, oscar, vera] = await Promise.all([as("alice"), as("oscar"), as("vera")]);
  });
  afterAll(async () => {
    await ts?.stop();
    await provider?.stop();
  });

  it("makes the user at first sign-in, with the role their groups map to, and names them", async () => {
    const me = await alice.getOperatorRole({});
    expect(me.role).toBe(OperatorRole.ADMIN);
    expect(me.credential).toBe("oidc");
    expect(me.user?.email).toBe("alice@example.com");
    expect(me.user?.name).toBe("Alice Admin");
    expect((await oscar.getOperatorRole({})).role).toBe(OperatorRole.OPERATOR);
    expect((await vera.getOperatorRole({})).role).toBe(OperatorRole.READ_ONLY);
    const users = (await alice.listUsers({})).users;
    expect(users.map((u) => u.email).sort()).toEqual(["alice@example.com", "oscar@example.com", "vera@example.com"]);
    expect(users.find((u) => u.email === "alice@example.com")?.subject).toBe("alice");
    const created = await ts.admin.listAuditEvents({ action: "user.created" });
    expect(created.events.map((e) => e.actorName).sort()).toEqual(["alice@example.com", "oscar@example.com", "vera@example.com"]);
  });

  it("refuses a user none of whose groups maps to a role", async () => {
    const nobody = await as("nobody");
    expect(await messageOf(nobody.listNodes({}))).toMatch(/no role: none of your groups/);
    expect(await codeOf(nobody.listNodes({}))).toBe(Code.PermissionDenied);
  });

  it("takes the role from the groups of each new token: a group removed at the provider shows at the next refresh", async () => {
    const before = await as("oscar");
    expect((await before.getOperatorRole({})).role).toBe(OperatorRole.OPERATOR);
    const demoted = await as("oscar", { groups: ["mf-viewers"] });
    expect((await demoted.getOperatorRole({})).role).toBe(OperatorRole.READ_ONLY);
    expect(await codeOf(demoted.createServiceKey({ name: "nope", deployments: ["x"] }))).toBe(Code.PermissionDenied);
    // The latest sign-in's role caps every credential of the user: the older token too.
    expect((await before.getOperatorRole({})).role).toBe(OperatorRole.READ_ONLY);
    // Back in the group: a new token says so, and the user is an operator again.
    const promoted = await as("oscar");
    expect((await promoted.getOperatorRole({})).role).toBe(OperatorRole.OPERATOR);
    expect((await oscar.getOperatorRole({})).role).toBe(OperatorRole.OPERATOR);
  });

  const roles: [string, Role][] = [
    ["vera", "viewer"],
    ["oscar", "operator"],
    ["alice", "admin"],
  ];
  it.each(AdminService.methods.map((m) => [m.name, m] as const))(
    "%s: each role allowed exactly as the contract's table says",
    async (_name, m: DescMethod) => {
      for (const [login, role] of roles) {
        const client = login === "vera" ? vera : login === "oscar" ? oscar : alice;
        const code = await callEmpty(client, m);
        if (mayCall({ role, user: true }, table.get(m.name))) {
          // An empty request may be invalid (no id): anything but an auth refusal is fine.
          expect([Code.PermissionDenied, Code.Unauthenticated], `${role} ${m.name}`).not.toContain(code);
        } else {
          expect(code, `${role} ${m.name}`).toBe(Code.PermissionDenied);
        }
      }
    },
  );

  describe("tokens a verifier must refuse", () => {
    const refusedWith = async (token: string, reason: RegExp) => {
      secrets.push(token);
      const client = bearerClient(ts.url, ts.caPem, token);
      const err = await client.listNodes({}).catch((e: unknown) => ConnectError.from(e));
      expect(err).toBeInstanceOf(ConnectError);
      expect((err as ConnectError).code).toBe(Code.Unauthenticated);
      expect((err as ConnectError).rawMessage).toMatch(reason);
    };
    it("tampered: a payload changed after signing", async () => {
      const [head, body, sig] = (await provider.mint("vera")).split(".");
      const claims = JSON.parse(Buffer.from(body!, "base64url").toString("utf8")) as Record<string, unknown>;
      const forged = Buffer.from(JSON.stringify({ ...claims, groups: ["mf-admins"] })).toString("base64url");
      await refusedWith(`${head}.${forged}.${sig}`, /signature verification failed/);
    });
    it("signed by a key the provider never published, under its key id", async () => {
      await refusedWith(await provider.mint("alice", {}, { key: await provider.foreignKey() }), /signature verification failed/);
    });
    it("expired", async () => {
      const now = Math.floor(Date.now() / 1000);
      await refusedWith(await provider.mint("alice", { iat: now - 7200, exp: now - 3600 }), /"exp" claim/);
    });
    it("for another audience", async () => {
      await refusedWith(await provider.mint("alice", { aud: "someone-else" }), /"aud" claim/);
    });
    it("from another issuer", async () => {
      await refusedWith(await provider.mint("alice", { iss: "http://127.0.0.1:1/evil" }), /"iss" claim/);
    });
    it("several audiences, issued to another party", async () => {
      await refusedWith(await provider.mint("alice", { aud: [provider.cliClientId, "other"], azp: "other" }), /azp/);
    });
    it("not a token at all", async () => {
      await refusedWith("not-a-jwt", /unrecognised bearer token/);
    });
  });

  it("follows a key rotation at the provider without a restart", async () => {
    await provider.rotateKeys();
    const rotated = await as("vera");
    // The key set is fetched again for the unknown key id, at most once per few seconds.
    const role = await waitFor(async () => (await rotated.getOperatorRole({}).catch(() => undefined))?.role, {
      what: "a token signed with the new key accepted",
    });
    expect(role).toBe(OperatorRole.READ_ONLY);
    // Tokens signed before the rotation still verify while the old key is published.
    expect((await vera.getOperatorRole({})).role).toBe(OperatorRole.READ_ONLY);
  });

  describe("personal access tokens", () => {
    it("are made by a user, never above their role, shown once, used, listed with their last use, and revoked", async () => {
      const made = await oscar.createPersonalToken({ name: "ci", ttl: durationFromMs(3_600_000), role: OperatorRole.READ_ONLY });
      secrets.push(made.token);
      expect(made.token).toMatch(/^mfpt_[A-Za-z0-9_-]{43}$/);
      expect(made.personalToken?.prefix).toBe(made.token.slice(0, 13));
      const ci = bearerClient(ts.url, ts.caPem, made.token);
      const me = await ci.getOperatorRole({});
      expect(me.role).toBe(OperatorRole.READ_ONLY);
      expect(me.credential).toBe("personal-token:ci");
      expect(me.user?.email).toBe("oscar@example.com");
      expect(await codeOf(ci.createServiceKey({ name: "by-ci", deployments: ["x"] }))).toBe(Code.PermissionDenied);
      const listed = (await oscar.listPersonalTokens({})).personalTokens;
      expect(listed.map((t) => t.name)).toEqual(["ci"]);
      expect(listed[0]!.lastUsedAt).toBeDefined();
      expect(JSON.stringify(listed, (_k, v: unknown) => (typeof v === "bigint" ? String(v) : v))).not.toContain(made.token.slice(13));
      // Another user's token is not theirs to revoke, nor to see.
      expect(await codeOf(vera.revokePersonalToken({ id: made.personalToken!.id }))).toBe(Code.NotFound);
      expect((await vera.listPersonalTokens({})).personalTokens).toEqual([]);
      await oscar.revokePersonalToken({ id: made.personalToken!.id });
      expect(await messageOf(ci.listNodes({}))).toMatch(/invalid personal token: revoked/);
    });
    it("refuses a role above the creator's, a duplicate live name, and a break-glass key", async () => {
      expect(await messageOf(vera.createPersonalToken({ name: "up", role: OperatorRole.ADMIN }))).toMatch(
        /a viewer cannot make a token with the admin role/,
      );
      const first = await vera.createPersonalToken({ name: "dup" });
      secrets.push(first.token);
      expect(first.personalToken?.role).toBe(OperatorRole.READ_ONLY);
      expect(await codeOf(vera.createPersonalToken({ name: "dup" }))).toBe(Code.AlreadyExists);
      expect(await messageOf(ts.admin.createPersonalToken({ name: "glass" }))).toMatch(/needs a signed-in user, not a break-glass key/);
      expect(await codeOf(vera.createPersonalToken({ name: "bad name!" }))).toBe(Code.InvalidArgument);
    });
  });

  it("gives a service key its owner, and lists keys by owner", async () => {
    await alice.createServiceKey({ name: "alices", deployments: ["chat"] });
    await ts.admin.createServiceKey({ name: "glass", deployments: ["chat"] });
    const all = (await alice.listServiceKeys({})).keys;
    expect(all.find((k) => k.name === "alices")?.owner?.email).toBe("alice@example.com");
    expect(all.find((k) => k.name === "glass")?.owner).toBeUndefined();
    const byEmail = (await alice.listServiceKeys({ owner: "alice@example.com" })).keys;
    expect(byEmail.map((k) => k.name)).toEqual(["alices"]);
    const aliceId = (await alice.getOperatorRole({})).user!.id;
    expect((await alice.listServiceKeys({ owner: aliceId })).keys.map((k) => k.name)).toEqual(["alices"]);
  });

  it("names the user as the actor of every event of their session, and filters the audit by them", async () => {
    const since = (await ts.admin.listAuditEvents({ pageSize: 1 })).events[0]?.time;
    const oscarId = (await oscar.getOperatorRole({})).user!.id;
    await oscar.createRuntimeProfile({ name: "oscar-cpu", engine: EngineKind.LLAMA_CPP, contextSize: 1024, threads: 1 });
    const key = await oscar.createServiceKey({ name: "oscars", deployments: ["chat"] });
    await oscar.updateServiceKeyLimits({ id: key.key!.id, limits: { requestsPerMinute: 10 } });
    await oscar.revokeServiceKey({ id: key.key!.id, reason: "done" });
    const events = (await ts.admin.listAuditEvents({ since, actor: "oscar@example.com" })).events;
    expect(events.map((e) => e.action).sort()).toEqual(
      ["runtime_profile.created", "service_key.created", "service_key.limits_changed", "service_key.revoked"].sort(),
    );
    for (const e of events) {
      expect(e.actor).toBe(`user:${oscarId}`);
      expect(e.actorName).toBe("oscar@example.com");
    }
    expect((await ts.admin.listAuditEvents({ since, actor: `user:${oscarId}` })).events).toHaveLength(events.length);
  });

  it("audits the break-glass key as break-glass", async () => {
    await ts.admin.createServiceKey({ name: "glass-2", deployments: ["chat"] });
    const [e] = (await ts.admin.listAuditEvents({ action: "service_key.created", pageSize: 1 })).events;
    expect(e?.actor).toBe("break-glass");
    expect(ts.logs()).toMatch(/break-glass operator keys are set beside single sign-on/);
  });

  it("deactivates a user at once: their tokens refused, their stream ended; reactivation lets them back in, their personal tokens stay dead", async () => {
    const pat = await oscar.createPersonalToken({ name: "gone" });
    secrets.push(pat.token);
    const byPat = bearerClient(ts.url, ts.caPem, pat.token);
    const oscarId = (await oscar.getOperatorRole({})).user!.id;
    const watch = (async () => {
      for await (const _ of oscar.watchNodes({})) {
        // An empty fleet sends nothing: the stream only ends.
      }
    })().then(
      () => "ended",
      (e: unknown) => ConnectError.from(e).code,
    );
    await waitFor(() => ts.server.operatorStreams() > 0, { what: "oscar's watch open" });
    expect(await messageOf(alice.deactivateUser({ id: (await alice.getOperatorRole({})).user!.id }))).toMatch(/cannot deactivate yourself/);
    const started = Date.now();
    await alice.deactivateUser({ id: oscarId });
    expect(await messageOf(oscar.listNodes({}))).toMatch(/user deactivated/);
    expect(await codeOf(byPat.listNodes({}))).toBe(Code.Unauthenticated);
    // Cut under it (the stream is reset), not ended as a watch of an empty fleet never is.
    expect(typeof (await watch)).toBe("number");
    expect(ts.server.operatorStreams()).toBe(0);
    expect(Date.now() - started).toBeLessThan(1_000 + 5_000);
    const [e] = (await ts.admin.listAuditEvents({ action: "user.deactivated" })).events;
    expect(e?.actorName).toBe("alice@example.com");
    expect(e?.targetId).toBe(oscarId);

    await alice.reactivateUser({ id: oscarId });
    expect((await oscar.getOperatorRole({})).role).toBe(OperatorRole.OPERATOR);
    expect(await messageOf(byPat.listNodes({}))).toMatch(/revoked/);
  });

  it("never writes a token, code or secret to the log", () => {
    const logs = ts.logs();
    expect(secrets.length).toBeGreaterThan(10);
    for (const s of [...secrets, provider.consoleClient.secret, testAdminKey]) expect(logs).not.toContain(s);
  });
});

describe("with the break-glass keys turned off", () => {
  let ts: TestServer;
  beforeAll(async () => {
    // Single sign-on is required with the keys off; its provider is never reached here.
    ts = await startTestServer({
      MODELFORGE_BREAK_GLASS: "off",
      MODELFORGE_OIDC_ISSUER: "http://127.0.0.1:9/unreachable",
      MODELFORGE_OIDC_CLIENT_ID: "console",
      MODELFORGE_OIDC_DEFAULT_ROLE: "viewer",
    });
  });
  afterAll(() => ts?.stop());

  it("is refused at start without single sign-on, since no one could sign in", () => {
    expect(() => loadConfig({ MODELFORGE_BREAK_GLASS: "off" })).toThrow(/needs single sign-on/);
  });

  it("refuses the static key, saying so, at the edge and for every method", async () => {
    expect(await messageOf(ts.admin.listNodes({}))).toMatch(/break-glass keys are turned off/);
    expect(await codeOf(ts.admin.createServiceKey({ name: "x", deployments: ["y"] }))).toBe(Code.Unauthenticated);
  });
});

describe("the console's sign-in, while the provider does not answer", () => {
  let ts: TestServer;
  let silent: Server;
  beforeAll(async () => {
    // Accepts connections and never answers: each sign-in waits on it until its deadline.
    silent = createServer(() => undefined);
    await new Promise<void>((resolve) => silent.listen(0, "127.0.0.1", resolve));
    ts = await startTestServer({
      MODELFORGE_OIDC_ISSUER: `http://127.0.0.1:${(silent.address() as AddressInfo).port}`,
      MODELFORGE_OIDC_CLIENT_ID: "console",
      MODELFORGE_OIDC_DEFAULT_ROLE: "viewer",
    });
  });
  afterAll(async () => {
    await ts?.stop();
    silent?.closeAllConnections();
    silent?.close();
  });

  it("holds at most 32 sign-ins at the provider at once, and turns the rest away at once with Retry-After", async () => {
    const dispatcher = new Agent({ connect: { ca: ts.caPem } });
    const login = Buffer.from(JSON.stringify({ state: "s", nonce: "n", verifier: "v".repeat(43) })).toString("base64url");
    const callback = () =>
      undiciFetch(`${ts.url}/auth/callback?code=c&state=s`, { headers: { cookie: `__Host-modelforge-login=${login}` }, dispatcher });
    const held = Array.from({ length: 32 }, callback);
    // The 33rd, once the 32 are in: refused without waiting on the provider.
    const extra = await waitFor(
      async () => {
        const res = await callback();
        return res.status === 503 && res.headers.get("retry-after") === "1" ? res : undefined;
      },
      { what: "a sign-in past the bound turned away" },
    );
    expect(await extra.text()).toMatch(/too many sign-ins at once/);
    // The held ones end at the provider's deadline, as unavailable, and free their places.
    const ended = await Promise.all(held);
    expect(new Set(ended.map((r) => r.status))).toEqual(new Set([503]));
    expect(await ended[0]!.text()).toMatch(/identity provider unreachable/);
  }, 60_000);
});
