// A real OpenID Provider on loopback for the operator-identity tests: `oidc-provider`, a certified
// implementation, with its own RSA keys, users (their email, name and groups), a confidential
// client for the web console (authorization code with PKCE) and a public one for `forge login`
// (the device grant, refresh tokens). Its development login form stands in for a company's
// sign-in page: any login name signs in as that user. Its port is taken before the provider is
// made, so the control plane can be configured with the issuer and the provider with the
// control plane's redirect URI. `rotateKeys` replaces the provider with one that signs with a new
// key (the old one still published), on the same address, as a key rotation does; `mint` signs
// ID tokens with the provider's own key, for the checks of what a verifier must refuse.
import { randomUUID } from "node:crypto";
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import Provider, { type Configuration, type KoaContextWithOIDC } from "oidc-provider";
import { exportJWK, generateKeyPair, SignJWT, type JWK } from "jose";
import type { Page } from "playwright-core";

/** At the provider's development login form, as its user would type it: any password will do. */
export async function signInAtProvider(page: Page, login: string): Promise<void> {
  await page.locator('input[name="login"]').fill(login);
  await page.locator('input[name="password"]').fill("any password");
  await page.getByRole("button", { name: "Sign-in" }).click();
}

export interface OidcUser {
  email: string;
  name: string;
  groups: string[];
}

export interface TestProvider {
  issuer: string;
  consoleClient: { id: string; secret: string };
  cliClientId: string;
  users: Map<string, OidcUser>;
  /** A new signing key; the old one stays published so tokens already issued still verify. */
  rotateKeys(): Promise<void>;
  /** An ID token for `login`, signed with the provider's current key, claims overridable. */
  mint(login: string, overrides?: Record<string, unknown>, options?: { key?: JWK }): Promise<string>;
  /** A key the provider never published, with the current key's id: what a forger would sign with. */
  foreignKey(): Promise<JWK>;
  stop(): Promise<void>;
}

async function signingKey(): Promise<JWK> {
  const { privateKey } = await generateKeyPair("RS256", { extractable: true });
  return { ...(await exportJWK(privateKey)), kid: `k-${Math.random().toString(36).slice(2, 10)}`, alg: "RS256", use: "sig" };
}

export async function startOidcProvider(options: {
  consoleRedirectUri: () => string;
  users: Record<string, OidcUser>;
  /** Whether it offers the device grant (default yes): without, `forge login` takes the loopback redirect. */
  deviceFlow?: boolean;
}): Promise<TestProvider> {
  const users = new Map(Object.entries(options.users));
  const consoleClient = { id: "modelforge-console", secret: "console-client-secret-0123456789abcdef" };
  const cliClientId = "modelforge-cli";
  // Made at the first request, once the control plane (and so the redirect URI) exists.
  let handler: ReturnType<Provider["callback"]> | undefined;
  const server: Server = createServer((req, res) => {
    handler ??= make();
    handler(req, res);
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const issuer = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  let keys: JWK[] = [await signingKey()];

  const make = () => {
    const configuration: Configuration = {
      clients: [
        {
          client_id: consoleClient.id,
          client_secret: consoleClient.secret,
          redirect_uris: [options.consoleRedirectUri()],
          grant_types: ["authorization_code", "refresh_token"],
          response_types: ["code"],
          token_endpoint_auth_method: "client_secret_basic",
        },
        {
          client_id: cliClientId,
          application_type: "native",
          token_endpoint_auth_method: "none",
          redirect_uris: ["http://127.0.0.1/callback"],
          grant_types: [
            ...(options.deviceFlow === false ? [] : ["urn:ietf:params:oauth:grant-type:device_code"]),
            "refresh_token",
            "authorization_code",
          ],
          response_types: ["code"],
        },
      ],
      jwks: { keys },
      cookies: { keys: ["test-provider-cookie-key-0123456789"] },
      claims: { openid: ["sub"], email: ["email", "email_verified"], profile: ["name"], groups: ["groups"] },
      // The ID token carries the profile, as Keycloak's and Entra's do: the control plane reads it there.
      conformIdTokenClaims: false,
      features: {
        devInteractions: { enabled: true },
        deviceFlow: { enabled: options.deviceFlow ?? true },
        revocation: { enabled: true },
      },
      pkce: { required: () => true },
      issueRefreshToken: async (_ctx: KoaContextWithOIDC, client) => client.grantTypeAllowed("refresh_token"),
      // Consent is the test's given: every scope asked is granted without a second form.
      loadExistingGrant: async (ctx: KoaContextWithOIDC) => {
        const accountId = ctx.oidc.session?.accountId;
        if (accountId === undefined || ctx.oidc.client === undefined) return undefined;
        const grant = new ctx.oidc.provider.Grant({ clientId: ctx.oidc.client.clientId, accountId });
        grant.addOIDCScope("openid email profile groups offline_access");
        await grant.save();
        return grant;
      },
      findAccount: async (_ctx: KoaContextWithOIDC, id: string) => ({
        accountId: id,
        claims: async () => {
          const u = users.get(id);
          return { sub: id, ...(u !== undefined ? { email: u.email, email_verified: true, name: u.name, groups: u.groups } : {}) };
        },
      }),
      ttl: { IdToken: 600, AccessToken: 600, DeviceCode: 600, Interaction: 600, Session: 3600, Grant: 3600, RefreshToken: 3600 },
    };
    const provider = new Provider(issuer, configuration);
    // The provider's development-mode notices go to the console; the tests need none of them.
    provider.on("server_error", () => undefined);
    return provider.callback();
  };

  const sign = async (payload: Record<string, unknown>, key: JWK) => {
    const { importJWK } = await import("jose");
    return new SignJWT(payload).setProtectedHeader({ alg: "RS256", kid: key.kid! }).sign(await importJWK(key, "RS256"));
  };

  return {
    issuer,
    consoleClient,
    cliClientId,
    users,
    async rotateKeys() {
      keys = [await signingKey(), ...keys];
      handler = make();
    },
    async mint(login, overrides = {}, opts = {}) {
      const u = users.get(login);
      const now = Math.floor(Date.now() / 1000);
      const payload = {
        iss: issuer,
        aud: cliClientId,
        sub: login,
        iat: now,
        exp: now + 600,
        // Two tokens minted in one second are two tokens, as a provider's are.
        jti: randomUUID(),
        ...(u !== undefined ? { email: u.email, name: u.name, groups: u.groups } : {}),
        ...overrides,
      };
      return sign(payload, opts.key ?? keys[0]!);
    },
    async foreignKey() {
      return { ...(await signingKey()), kid: keys[0]!.kid };
    },
    stop: () => new Promise<void>((resolve) => server.close(() => resolve())),
  };
}
