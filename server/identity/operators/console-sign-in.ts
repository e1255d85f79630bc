// The web console's sign-in: the authorization code flow with PKCE, `state` and `nonce`
// (openid-client), its ID token verified again by ./oidc.ts, the user made or refreshed, and a
// console session handed to the browser as an HttpOnly, Secure, SameSite=Strict cookie with a
// bounded lifetime. Paths:
//   GET  /auth/config    what a client needs to sign in (the CLI reads it): issuer, client, scopes
//   GET  /auth/login     to the provider
//   GET  /auth/callback  back from it
//   POST /auth/logout    ends the console session
import type { IncomingMessage, ServerResponse } from "node:http";
import type http2 from "node:http2";
import * as client from "openid-client";
import { Code, ConnectError } from "@connectrpc/connect";
import { codeToHttpStatus } from "@connectrpc/connect/protocol-connect";
import { parseCookie, stringifySetCookie } from "cookie";
import type { Logger } from "../../observability/logger.js";
import { codeName } from "../../../common/codes.js";
import { cookieMayAuthenticate, sessionCookie, sessionSecretOf } from "./authenticate.js";
import { endConsoleSession, startConsoleSession, type SessionsDeps } from "./console-sessions.js";
import type { OidcProvider } from "./oidc.js";
import { signedInAs } from "./sign-in.js";
import { signIn } from "./users.js";

type HttpRequest = http2.Http2ServerRequest | IncomingMessage;
type HttpResponse = http2.Http2ServerResponse | ServerResponse;

export const authPrefix = "/auth/";
const loginCookie = "__Host-modelforge-login";
/** How long a sign-in may take at the provider. */
const loginTtlSeconds = 600;
/** Where the browser lands once signed in. */
const consoleHome = "/ui/";
/** Sign-ins talking to the provider at once: anyone can start one, so each is a call we make for them. */
const maxAtProvider = 32;

export interface ConsoleSignInDeps extends SessionsDeps {
  oidc: OidcProvider | undefined;
  breakGlass: boolean;
  sessionTtlMs: number;
  /** The console's public origin (MODELFORGE_PUBLIC_URL); undefined: the host the browser used. */
  publicUrl: string | undefined;
  log: Logger;
}

/** Answers /auth/ paths; false for any other. */
export function consoleSignIn(deps: ConsoleSignInDeps): (req: HttpRequest, res: HttpResponse, correlationId: string) => boolean {
  let atProvider = 0;
  return (req, res, correlationId) => {
    const url = req.url ?? "";
    if (!url.startsWith(authPrefix)) return false;
    const path = url.split("?", 1)[0]!;
    const route = routes[`${req.method ?? "GET"} ${path}`];
    if (route === undefined) {
      answerText(res, 404, "not found");
      return true;
    }
    const callsProvider = path === "/auth/callback";
    if (callsProvider && atProvider >= maxAtProvider) {
      res.setHeader("retry-after", "1");
      answerText(res, 503, "too many sign-ins at once: try again in a moment");
      return true;
    }
    if (callsProvider) atProvider++;
    route(deps, req, res, correlationId)
      .catch((err: unknown) => {
        const e = ConnectError.from(err);
        deps.log.warn({ correlationId, path, code: codeName(e.code), message: e.rawMessage }, "console sign-in failed");
        if (!res.headersSent) answerText(res, codeToHttpStatus(e.code), `sign-in failed: ${e.rawMessage}`);
        else res.end();
      })
      .finally(() => {
        if (callsProvider) atProvider--;
      });
    return true;
  };
}

type Route = (deps: ConsoleSignInDeps, req: HttpRequest, res: HttpResponse, correlationId: string) => Promise<void>;

const routes: Record<string, Route> = {
  "GET /auth/config": async (deps, _req, res) => {
    const sso = deps.oidc?.config;
    answerJson(res, 200, {
      sso: sso !== undefined ? { issuer: sso.issuer, cliClientId: sso.cliClientId, scopes: sso.scopes } : null,
      breakGlass: deps.breakGlass,
    });
  },
  "GET /auth/login": async (deps, req, res) => {
    const oidc = ssoOf(deps);
    const config = await oidc.configuration();
    const verifier = client.randomPKCECodeVerifier();
    const state = client.randomState();
    const nonce = client.randomNonce();
    const to = client.buildAuthorizationUrl(config, {
      redirect_uri: callbackUrl(deps, req),
      scope: oidc.config.scopes.join(" "),
      code_challenge: await client.calculatePKCECodeChallenge(verifier),
      code_challenge_method: "S256",
      state,
      nonce,
    });
    res.setHeader(
      "set-cookie",
      cookie(loginCookie, Buffer.from(JSON.stringify({ state, nonce, verifier })).toString("base64url"), loginTtlSeconds, "lax"),
    );
    redirect(res, to.href);
  },
  "GET /auth/callback": async (deps, req, res, correlationId) => {
    const oidc = ssoOf(deps);
    const pending = pendingLogin(req);
    const config = await oidc.configuration();
    const query = (req.url ?? "").slice((req.url ?? "").indexOf("?"));
    let tokens: Awaited<ReturnType<typeof client.authorizationCodeGrant>>;
    try {
      tokens = await client.authorizationCodeGrant(config, new URL(`${callbackUrl(deps, req)}${query}`), {
        pkceCodeVerifier: pending.verifier,
        expectedState: pending.state,
        expectedNonce: pending.nonce,
        idTokenExpected: true,
      });
    } catch (err) {
      throw new ConnectError(`the identity provider refused: ${(err as Error).message}`, Code.Unauthenticated);
    }
    const claims = await oidc.verifyIdToken(tokens.id_token ?? "", [oidc.config.clientId], pending.nonce);
    const who = signedInAs(oidc.config, claims);
    const user = await signIn(deps, who, correlationId);
    const secret = await startConsoleSession(deps, user.id, who.role, deps.sessionTtlMs);
    deps.log.info({ correlationId, userId: user.id, role: who.role }, "console signed in");
    res.setHeader("set-cookie", [
      cookie(sessionCookie, secret, Math.floor(deps.sessionTtlMs / 1000), "strict"),
      cookie(loginCookie, "", 0, "lax"),
    ]);
    redirect(res, consoleHome);
  },
  "POST /auth/logout": async (deps, req, res) => {
    const secret = sessionSecretOf(headerOf(req, "cookie"));
    // The console's fetch; a cross-site form cannot end someone's session.
    if (
      secret !== undefined &&
      cookieMayAuthenticate({ contentType: headerOf(req, "content-type"), origin: headerOf(req, "origin"), host: hostOf(req) })
    ) {
      await endConsoleSession(deps, secret);
    }
    res.setHeader("set-cookie", cookie(sessionCookie, "", 0, "strict"));
    answerJson(res, 200, { signedOut: true });
  },
};

function ssoOf(deps: ConsoleSignInDeps): OidcProvider {
  if (deps.oidc === undefined)
    throw new ConnectError("single sign-on is not configured on this server (MODELFORGE_OIDC_ISSUER)", Code.FailedPrecondition);
  return deps.oidc;
}

function pendingLogin(req: HttpRequest): { state: string; nonce: string; verifier: string } {
  const raw = parseCookie(headerOf(req, "cookie") ?? "")[loginCookie];
  try {
    const parsed = JSON.parse(Buffer.from(raw ?? "", "base64url").toString("utf8")) as Record<string, unknown>;
    const { state, nonce, verifier } = parsed;
    if (typeof state === "string" && typeof nonce === "string" && typeof verifier === "string") return { state, nonce, verifier };
  } catch {
    // Answered below.
  }
  throw new ConnectError(
    "no sign-in in progress in this browser (or it took longer than 10 minutes): start again at /auth/login",
    Code.FailedPrecondition,
  );
}

const headerOf = (req: HttpRequest, name: string): string | null => {
  const v = req.headers[name];
  return typeof v === "string" ? v : null;
};

const hostOf = (req: HttpRequest): string | null => headerOf(req, ":authority") ?? headerOf(req, "host");

function callbackUrl(deps: ConsoleSignInDeps, req: HttpRequest): string {
  const base = deps.publicUrl ?? `https://${hostOf(req) ?? "localhost"}`;
  return `${base.replace(/\/+$/, "")}/auth/callback`;
}

function cookie(name: string, value: string, maxAgeSeconds: number, sameSite: "lax" | "strict"): string {
  return stringifySetCookie(name, value, { httpOnly: true, secure: true, sameSite, path: "/", maxAge: maxAgeSeconds });
}

function redirect(res: HttpResponse, to: string): void {
  res.writeHead(303, { location: to, "cache-control": "no-store" });
  res.end();
}

function answerText(res: HttpResponse, status: number, text: string): void {
  res.writeHead(status, { "content-type": "text/plain; charset=utf-8", "cache-control": "no-store" });
  res.end(`${text}\n`);
}

function answerJson(res: HttpResponse, status: number, body: unknown): void {
  res.writeHead(status, { "content-type": "application/json", "cache-control": "no-store" });
  res.end(JSON.stringify(body));
}
