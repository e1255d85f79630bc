// The server's side of the OpenID Connect provider: its metadata, found by discovery (openid-client),
// and the verification of every ID token the server accepts (jose): the signature against the
// provider's JWKS (cached; a key id not seen before fetches the set again, so a key rotation at the
// provider is followed without a restart), and `iss`, `aud`, `azp`, `exp`, `iat` and, where the
// server asked for one, `nonce`. Nothing here is parsed by hand.
import * as client from "openid-client";
import { createRemoteJWKSet, jwtVerify, type JWTPayload } from "jose";
import { Code, ConnectError } from "@connectrpc/connect";
import type { Clock } from "../../../common/clock.js";
import type { SsoConfig } from "../../sso-config.js";

/** Asymmetric algorithms only: an ID token "signed" with a shared secret or "none" is refused. */
const algorithms = ["RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512", "EdDSA"];
/** Between clocks, ours and the provider's. */
const clockToleranceSeconds = 30;
/** How soon an unknown key id may fetch the key set again: rotation followed, floods of made-up kids not. */
const jwksRefetchFloorMs = 5_000;

export interface IdentityClaims extends JWTPayload {
  sub: string;
  email?: string;
  name?: string;
  preferred_username?: string;
  nonce?: string;
  azp?: string;
}

export class OidcProvider {
  private discovered: Promise<client.Configuration> | undefined;
  private jwks: ReturnType<typeof createRemoteJWKSet> | undefined;

  constructor(
    readonly config: SsoConfig,
    private readonly clock: Clock,
  ) {}

  /** The console client's configuration, discovered once; a failed discovery is tried again at the next call. */
  configuration(): Promise<client.Configuration> {
    this.discovered ??= this.discover().catch((err: unknown) => {
      this.discovered = undefined;
      throw new ConnectError(`identity provider unreachable: ${(err as Error).message}`, Code.Unavailable);
    });
    return this.discovered;
  }

  private async discover(): Promise<client.Configuration> {
    const { issuer, clientId, clientSecret } = this.config;
    const insecure = new URL(issuer).protocol === "http:";
    const auth = clientSecret !== undefined ? client.ClientSecretBasic(clientSecret) : client.None();
    const found = await client.discovery(new URL(issuer), clientId, clientSecret, auth, {
      ...(insecure ? { execute: [client.allowInsecureRequests] } : {}),
      timeout: 10,
    });
    const jwksUri = found.serverMetadata().jwks_uri;
    if (jwksUri === undefined) throw new Error("the provider's metadata names no jwks_uri");
    this.jwks = createRemoteJWKSet(new URL(jwksUri), { cooldownDuration: jwksRefetchFloorMs, timeoutDuration: 10_000 });
    return found;
  }

  /** A verified ID token's claims, for one of `audiences`; refused with unauthenticated and why. */
  async verifyIdToken(token: string, audiences: readonly string[], nonce?: string): Promise<IdentityClaims> {
    await this.configuration();
    let payload: JWTPayload;
    try {
      ({ payload } = await jwtVerify(token, this.jwks!, {
        issuer: this.config.issuer,
        audience: [...audiences],
        algorithms,
        clockTolerance: clockToleranceSeconds,
        currentDate: new Date(this.clock.now()),
        requiredClaims: ["sub", "exp", "iat"],
      }));
    } catch (err) {
      throw new ConnectError(`invalid identity token: ${reasonOf(err)}`, Code.Unauthenticated);
    }
    const aud = Array.isArray(payload.aud) ? payload.aud : [payload.aud];
    // Several audiences: the party it was issued to must be ours (OpenID Connect Core 3.1.3.7).
    if (aud.length > 1 && !audiences.includes(String(payload.azp ?? ""))) {
      throw new ConnectError("invalid identity token: issued to another party (azp)", Code.Unauthenticated);
    }
    if (nonce !== undefined && payload.nonce !== nonce)
      throw new ConnectError("invalid identity token: nonce mismatch", Code.Unauthenticated);
    return payload as IdentityClaims;
  }
}

/** jose's error code and message say which check failed, and never hold the token. */
function reasonOf(err: unknown): string {
  const e = err as { code?: string; message?: string };
  return e.code !== undefined ? `${e.code}: ${e.message ?? ""}` : "unverifiable";
}
