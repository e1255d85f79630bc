// `forge login`: signing in through the control plane's OpenID Connect provider, and keeping the
// result. The provider's device authorization grant (RFC 8628) where it offers one, else the
// authorization code flow with PKCE through a redirect to a loopback port (RFC 8252). Every
// protocol step is openid-client's; the CLI only shows the user where to go and stores the
// tokens, mode 0600, refreshing the ID token before it expires.
import { createServer } from "node:http";
import { request } from "node:https";
import { chmodSync, mkdirSync, readFileSync, renameSync, rmSync, writeFileSync } from "node:fs";
import { homedir } from "node:os";
import { dirname, join } from "node:path";
import type { AddressInfo } from "node:net";
import * as client from "openid-client";
import { isLoopbackUrl } from "../common/loopback.js";
import { ConfigError } from "./usage-error.js";

/** What the control plane says at /auth/config. */
export interface SignInConfig {
  sso: { issuer: string; cliClientId: string; scopes: string[] } | null;
  breakGlass: boolean;
}

/** One server's sign-in, as kept on disk. */
export interface StoredLogin {
  issuer: string;
  clientId: string;
  idToken: string;
  refreshToken?: string | undefined;
  /** When the ID token expires (ms since the epoch). */
  expiresAt: number;
}

interface LoginFile {
  logins: Record<string, StoredLogin>;
}

/** Refreshed this long before it expires, so a command never starts with a token about to lapse. */
const refreshMarginMs = 60_000;

export function loginFileOf(env: NodeJS.ProcessEnv): string {
  if (env.MODELFORGE_LOGIN_FILE) return env.MODELFORGE_LOGIN_FILE;
  const base = env.XDG_CONFIG_HOME || join(env.HOME || homedir(), ".config");
  return join(base, "modelforge", "login.json");
}

function readLogins(file: string): LoginFile {
  let text: string;
  try {
    text = readFileSync(file, "utf8");
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === "ENOENT") return { logins: {} };
    throw new ConfigError(`cannot read ${file}: ${(err as NodeJS.ErrnoException).code ?? (err as Error).message}`);
  }
  try {
    const parsed = JSON.parse(text) as LoginFile;
    if (parsed === null || typeof parsed.logins !== "object") throw new Error("no logins");
    return parsed;
  } catch {
    throw new ConfigError(`${file} is not a forge login file: remove it and run forge login again`);
  }
}

/** Written whole to a new file, then renamed over the old one: never half a file, never readable by others. */
function writeLogins(file: string, content: LoginFile): void {
  mkdirSync(dirname(file), { recursive: true, mode: 0o700 });
  const tmp = `${file}.${process.pid}.tmp`;
  writeFileSync(tmp, `${JSON.stringify(content, null, 2)}\n`, { mode: 0o600 });
  chmodSync(tmp, 0o600);
  renameSync(tmp, file);
}

export function storedLogin(env: NodeJS.ProcessEnv, server: string): StoredLogin | undefined {
  return readLogins(loginFileOf(env)).logins[server];
}

export function storeLogin(env: NodeJS.ProcessEnv, server: string, login: StoredLogin | undefined): void {
  const file = loginFileOf(env);
  const content = readLogins(file);
  if (login === undefined) delete content.logins[server];
  else content.logins[server] = login;
  if (Object.keys(content.logins).length === 0) rmSync(file, { force: true });
  else writeLogins(file, content);
}

/** GET <server>/auth/config, trusting only the control plane's CA. */
export function fetchSignInConfig(server: string, caPem: string, signal: AbortSignal): Promise<SignInConfig> {
  return new Promise((resolve, reject) => {
    const req = request(new URL("/auth/config", server), { ca: caPem, signal, timeout: 30_000 }, (res) => {
      let body = "";
      res.setEncoding("utf8");
      res.on("data", (chunk: string) => {
        body += chunk;
        if (body.length > 64 * 1024) req.destroy(new Error("answer too large"));
      });
      res.on("end", () => {
        if (res.statusCode !== 200) return reject(new Error(`${server}/auth/config answered ${res.statusCode}`));
        try {
          resolve(JSON.parse(body) as SignInConfig);
        } catch {
          reject(new Error(`${server}/auth/config is not JSON`));
        }
      });
    });
    req.on("timeout", () => req.destroy(new Error("timed out")));
    req.on("error", reject);
    req.end();
  });
}

/** The provider, found from its issuer; plain http only for a provider on loopback (as in tests). */
export async function discoverProvider(issuer: string, clientId: string): Promise<client.Configuration> {
  const url = new URL(issuer);
  if (url.protocol !== "https:" && !(url.protocol === "http:" && isLoopbackUrl(url)))
    throw new ConfigError(`the identity provider ${issuer} is not https`);
  return client.discovery(
    url,
    clientId,
    undefined,
    client.None(),
    url.protocol === "http:" ? { execute: [client.allowInsecureRequests] } : {},
  );
}

type Tokens = client.TokenEndpointResponse & client.TokenEndpointResponseHelpers;

function loginOf(issuer: string, clientId: string, tokens: Tokens, previous?: StoredLogin): StoredLogin {
  const exp = tokens.claims()?.exp;
  if (tokens.id_token === undefined || exp === undefined) throw new Error("the identity provider returned no ID token");
  return {
    issuer,
    clientId,
    idToken: tokens.id_token,
    refreshToken: tokens.refresh_token ?? previous?.refreshToken,
    expiresAt: exp * 1000,
  };
}

export interface Prompter {
  /** Tells the user what to do (stderr). */
  say(text: string): void;
  signal: AbortSignal;
}

/** What a provider's refusal says (openid-client keeps its OAuth error apart from the message). */
function refusalOf(err: unknown): Error {
  const e = err as { message?: string; error?: string; error_description?: string };
  if (e.error === undefined) return err as Error;
  return new Error(`the identity provider refused: ${e.error}${e.error_description ? ` (${e.error_description})` : ""}`);
}

/** Signs in: the device grant where the provider offers it, else a loopback redirect. */
export async function signIn(sso: NonNullable<SignInConfig["sso"]>, prompt: Prompter): Promise<StoredLogin> {
  try {
    return await signInWith(sso, prompt);
  } catch (err) {
    throw refusalOf(err);
  }
}

async function signInWith(sso: NonNullable<SignInConfig["sso"]>, prompt: Prompter): Promise<StoredLogin> {
  const config = await discoverProvider(sso.issuer, sso.cliClientId);
  const offered = config.serverMetadata().scopes_supported;
  // A refresh token needs offline_access at most providers; asked only where it is offered.
  const scope = [...sso.scopes, ...(offered?.includes("offline_access") ? ["offline_access"] : [])].join(" ");
  const tokens =
    config.serverMetadata().device_authorization_endpoint !== undefined
      ? await deviceGrant(config, scope, prompt)
      : await loopbackRedirect(config, scope, prompt);
  return loginOf(sso.issuer, sso.cliClientId, tokens);
}

async function deviceGrant(config: client.Configuration, scope: string, prompt: Prompter): Promise<Tokens> {
  const device = await client.initiateDeviceAuthorization(config, { scope });
  const where = device.verification_uri_complete ?? device.verification_uri;
  prompt.say(`To sign in, open ${where}\nand confirm the code ${device.user_code}\nWaiting...\n`);
  return client.pollDeviceAuthorizationGrant(config, device, undefined, { signal: prompt.signal });
}

async function loopbackRedirect(config: client.Configuration, scope: string, prompt: Prompter): Promise<Tokens> {
  const verifier = client.randomPKCECodeVerifier();
  const state = client.randomState();
  const nonce = client.randomNonce();
  let answer: (url: URL) => void = () => undefined;
  const returned = new Promise<URL>((resolve) => {
    answer = resolve;
  });
  let redirectUri = "";
  const server = createServer((req, res) => {
    // The redirect URI as sent, port included: the token request must name it exactly.
    const url = new URL(req.url ?? "/", redirectUri);
    if (url.pathname !== "/callback") return void res.writeHead(404).end();
    res.writeHead(200, { "content-type": "text/plain; charset=utf-8" }).end("Signed in: you can close this window and return to forge.\n");
    answer(url);
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  try {
    redirectUri = `http://127.0.0.1:${(server.address() as AddressInfo).port}/callback`;
    const to = client.buildAuthorizationUrl(config, {
      redirect_uri: redirectUri,
      scope,
      code_challenge: await client.calculatePKCECodeChallenge(verifier),
      code_challenge_method: "S256",
      state,
      nonce,
    });
    prompt.say(`To sign in, open ${to.href}\nWaiting...\n`);
    const aborted = new Promise<never>((_, reject) =>
      prompt.signal.addEventListener("abort", () => reject(new Error("interrupted")), { once: true }),
    );
    const back = await Promise.race([returned, aborted]);
    return await client.authorizationCodeGrant(config, back, {
      pkceCodeVerifier: verifier,
      expectedState: state,
      expectedNonce: nonce,
      idTokenExpected: true,
    });
  } finally {
    server.close();
  }
}

/** The ID token to present now: refreshed first when it is about to expire. */
export async function currentIdToken(env: NodeJS.ProcessEnv, server: string, now: number): Promise<string> {
  const login = storedLogin(env, server);
  if (login === undefined) throw new ConfigError(`not signed in to ${server}: run forge login`);
  if (login.expiresAt - refreshMarginMs > now) return login.idToken;
  if (login.refreshToken === undefined) throw new ConfigError("your sign-in has expired: run forge login");
  let refreshed: StoredLogin;
  try {
    const config = await discoverProvider(login.issuer, login.clientId);
    refreshed = loginOf(login.issuer, login.clientId, await client.refreshTokenGrant(config, login.refreshToken), login);
  } catch (err) {
    throw new ConfigError(`your sign-in could not be refreshed (${refusalOf(err).message}): run forge login`);
  }
  storeLogin(env, server, refreshed);
  return refreshed.idToken;
}

/** Forgets the sign-in, revoking its refresh token at the provider first where it can. */
export async function signOut(env: NodeJS.ProcessEnv, server: string): Promise<{ signedIn: boolean; revoked: boolean }> {
  const login = storedLogin(env, server);
  if (login === undefined) return { signedIn: false, revoked: false };
  let revoked = false;
  if (login.refreshToken !== undefined) {
    try {
      const config = await discoverProvider(login.issuer, login.clientId);
      if (config.serverMetadata().revocation_endpoint !== undefined) {
        await client.tokenRevocation(config, login.refreshToken, { token_type_hint: "refresh_token" });
        revoked = true;
      }
    } catch {
      // Forgotten here all the same; the provider ends it at its own expiry.
    }
  }
  storeLogin(env, server, undefined);
  return { signedIn: true, revoked };
}
