// The pure rules of operator identity: single sign-on settings, groups to roles, what a verified ID
// token says about its user, and when the console's cookie may authenticate a call.
import { describe, expect, it } from "vitest";
import { groupsIn, parseRoleMap, parseSsoConfig, roleForGroups } from "../../server/sso-config.js";
import { signedInAs } from "../../server/identity/operators/sign-in.js";
import { bearerOf, cookieMayAuthenticate, sessionSecretOf } from "../../server/identity/operators/authenticate.js";
import { lowerRole, roleAtLeast } from "../../server/operator-roles.js";

const base = {
  MODELFORGE_OIDC_ISSUER: "https://id.example.com/realms/ops",
  MODELFORGE_OIDC_CLIENT_ID: "console",
  MODELFORGE_OIDC_ROLES: "ops=operator",
};

describe("single sign-on settings", () => {
  it("are off without an issuer, and filled with defaults with one", () => {
    expect(parseSsoConfig({})).toBeUndefined();
    expect(parseSsoConfig(base)).toEqual({
      issuer: "https://id.example.com/realms/ops",
      clientId: "console",
      clientSecret: undefined,
      cliClientId: "console",
      scopes: ["openid", "profile", "email"],
      groupsClaim: "groups",
      roleMap: [{ group: "ops", role: "operator" }],
      defaultRole: undefined,
    });
    expect(parseSsoConfig({ ...base, MODELFORGE_OIDC_SCOPES: "profile groups" })?.scopes).toEqual(["openid", "profile", "groups"]);
  });
  it.each([
    [{ MODELFORGE_OIDC_ISSUER: "http://id.example.com" }, /use https/],
    [{ MODELFORGE_OIDC_ISSUER: "not a url" }, /not a URL/],
    [{ MODELFORGE_OIDC_CLIENT_ID: "" }, /CLIENT_ID: required/],
    [{ MODELFORGE_OIDC_ROLES: "" }, /map at least one group/],
    [{ MODELFORGE_OIDC_ROLES: "ops=root" }, /expected viewer, operator or admin/],
    [{ MODELFORGE_OIDC_ROLES: "=admin" }, /expected group=role/],
    [{ MODELFORGE_OIDC_DEFAULT_ROLE: "owner" }, /DEFAULT_ROLE/],
  ])("refuses %o", (change, message) => {
    expect(() => parseSsoConfig({ ...base, ...change })).toThrow(message);
  });
  it("allows http on loopback only, and a default role in place of a map", () => {
    expect(parseSsoConfig({ ...base, MODELFORGE_OIDC_ISSUER: "http://127.0.0.1:9000" })?.issuer).toBe("http://127.0.0.1:9000");
    expect(parseSsoConfig({ ...base, MODELFORGE_OIDC_ROLES: "", MODELFORGE_OIDC_DEFAULT_ROLE: "viewer" })?.defaultRole).toBe("viewer");
  });
});

describe("groups to roles", () => {
  const map = parseRoleMap("mf-admins=admin, mf-ops = operator,cn=viewers=viewer,ou=x=viewer");
  it("parses group=role lists, group names with = in them too", () => {
    expect(map).toEqual([
      { group: "mf-admins", role: "admin" },
      { group: "mf-ops", role: "operator" },
      { group: "cn=viewers", role: "viewer" },
      { group: "ou=x", role: "viewer" },
    ]);
  });
  it.each([
    [["mf-ops"], undefined, "operator"],
    [["mf-ops", "mf-admins"], undefined, "admin"],
    [["cn=viewers", "mf-ops"], undefined, "operator"],
    [["staff"], undefined, undefined],
    [["staff"], "viewer", "viewer"],
    [["mf-admins"], "viewer", "admin"],
    [[], undefined, undefined],
  ] as const)("%o (default %s) is %s", (groups, fallback, role) => {
    expect(roleForGroups(groups, map, fallback)).toBe(role);
  });
  it.each([
    [{ groups: ["a", "b", 3] }, "groups", ["a", "b"]],
    [{ groups: "a" }, "groups", ["a"]],
    [{ realm_access: { roles: ["r"] } }, "realm_access.roles", ["r"]],
    [{ "realm_access.roles": ["flat"] }, "realm_access.roles", ["flat"]],
    [{}, "groups", []],
    [{ groups: { a: 1 } }, "groups", []],
  ])("finds the groups in %o at %s", (claims, claim, groups) => {
    expect(groupsIn(claims, claim)).toEqual(groups);
  });
  it("orders roles", () => {
    expect(roleAtLeast("admin", "operator")).toBe(true);
    expect(roleAtLeast("viewer", "operator")).toBe(false);
    expect(lowerRole("admin", "viewer")).toBe("viewer");
    expect(lowerRole("operator", "admin")).toBe("operator");
  });
});

describe("a sign-in from a verified ID token", () => {
  const config = { issuer: "https://id", groupsClaim: "groups", roleMap: parseRoleMap("ops=operator"), defaultRole: undefined };
  it("takes who, email, name and role; cleans and bounds what it shows", () => {
    expect(signedInAs(config, { sub: "u1", email: "a@b.c", name: "A\u0007 B", groups: ["ops"] })).toEqual({
      issuer: "https://id",
      subject: "u1",
      email: "a@b.c",
      name: "A B",
      role: "operator",
    });
    const long = signedInAs(config, { sub: "u2", preferred_username: "x".repeat(1000), groups: ["ops"] });
    expect(long.name).toHaveLength(256);
    expect(long.email).toHaveLength(320);
  });
  it("refuses no role, and a missing or oversized subject", () => {
    expect(() => signedInAs(config, { sub: "u1", groups: ["staff"] })).toThrow(/no role/);
    expect(() => signedInAs(config, { sub: "", groups: ["ops"] })).toThrow(/sub missing/);
    expect(() => signedInAs(config, { sub: "s".repeat(256), groups: ["ops"] })).toThrow(/too long/);
  });
});

describe("presented credentials", () => {
  it.each([
    ["Bearer abc", "abc"],
    ["bearer  abc ", "abc"],
  ])("reads %s", (header, token) => {
    expect(bearerOf(header)).toBe(token);
  });
  it("refuses an authorization header that is not a bearer token", () => {
    expect(() => bearerOf("Basic dXNlcjpwYXNz")).toThrow(/expected "Bearer <token>"/);
    expect(bearerOf(null)).toBeUndefined();
  });
  it.each([
    // [content type, origin, host, may authenticate]
    ["application/json", null, "cp:8443", true],
    ["application/proto", "https://cp:8443", "cp:8443", true],
    ["application/grpc-web+proto", "https://cp:8443", "cp:8443", true],
    ["application/json", "https://evil.example", "cp:8443", false],
    ["application/json", "null", "cp:8443", false],
    ["application/x-www-form-urlencoded", null, "cp:8443", false],
    ["text/plain", null, "cp:8443", false],
    [null, null, "cp:8443", false],
    ["application/json", "https://cp:8443", null, false],
  ] as const)("a cookie with %s from %s to %s: %s", (contentType, origin, host, may) => {
    expect(cookieMayAuthenticate({ contentType, origin, host })).toBe(may);
  });
  it("finds the session among other cookies", () => {
    expect(sessionSecretOf("a=1; __Host-modelforge-session=s3cr3t; b=2")).toBe("s3cr3t");
    expect(sessionSecretOf("a=1")).toBeUndefined();
    expect(sessionSecretOf(null)).toBeUndefined();
  });
});
