// Service keys: the only credential DeploymentService accepts. A secret of 256 random bits, shown
// once, stored only as its SHA-256; scoped to deployment names; optional expiry; revocable.
// Looking a key up by its hash is safe for a secret of this entropy, and the final comparison is
// constant-time anyway. Authentication is on every invoke's path, so a key's row is cached for a
// short while: revocation on this replica drops it at once, other replicas within `cacheMs`.
// While the database cannot be reached, a key read from it within the last `outageTrustMs` is
// still accepted (its expiry still applies): invokes go on through an outage, and a revocation made
// on another replica just before it goes unseen here for at most that long after the last read.
import { hash, randomBytes, randomUUID, timingSafeEqual } from "node:crypto";
import type { KeyLimits } from "../usage/limit-rules.js";
import { Code, ConnectError } from "@connectrpc/connect";
import { Prisma, type PrismaClient, type ServiceKey } from "../../gen/prisma/client.js";
import type { DirectQuery, DirectStatement } from "../db/direct.js";
import type { Clock } from "../../common/clock.js";
import { recordAudit, type AuditActor } from "../audit/audit.js";
import { LookupCache } from "../../common/lookup-cache.js";
import { isUuid } from "../../common/x509.js";
import { staleWhileDatabaseAway, type OutageWatch } from "../db/availability.js";

const secretPrefix = "mfsk_";
/** "mfsk_" and 43 base64url characters. */
const secretPattern = /^mfsk_[A-Za-z0-9_-]{43}$/;
const namePattern = /^[a-z0-9][a-z0-9._-]{0,63}$/;

export function newServiceKeySecret(): string {
  return secretPrefix + randomBytes(32).toString("base64url");
}

export function hashServiceKeySecret(secret: string): string {
  return hash("sha256", secret, "hex");
}

/** The secret in an Authorization header ("Bearer mfsk_..."), or undefined when it names none. */
export function bearerServiceKey(header: string | null | undefined): string | undefined {
  if (header === null || header === undefined) return undefined;
  const m = /^Bearer\s+(\S+)$/i.exec(header.trim());
  return m?.[1]?.startsWith(secretPrefix) ? m[1] : undefined;
}

/** Whether a header carries something meant as a service key (even a malformed one). */
export function looksLikeServiceKey(header: string | null | undefined): boolean {
  return header?.includes(secretPrefix) ?? false;
}

export type ServiceKeyState = "active" | "revoked" | "expired";

export function serviceKeyState(k: Pick<ServiceKey, "revokedAt" | "expiresAt">, now: number): ServiceKeyState {
  if (k.revokedAt !== null) return "revoked";
  if (k.expiresAt !== null && k.expiresAt.getTime() <= now) return "expired";
  return "active";
}

/** Pure checks of a new key's name and scope; the message names the field. */
export function checkServiceKeyInput(name: string, deployments: readonly string[]): void {
  if (!namePattern.test(name)) {
    throw new ConnectError("name: 1 to 64 characters of a-z, 0-9, '.', '_' and '-', starting with a letter or digit", Code.InvalidArgument);
  }
  if (deployments.length === 0) throw new ConnectError("deployments: name at least one deployment", Code.InvalidArgument);
  for (const d of deployments) {
    if (d.trim() === "" || d !== d.trim()) throw new ConnectError(`deployments: "${d}" is not a deployment name`, Code.InvalidArgument);
  }
}

/** A refusal of a key the server knows: its id goes to the audit log (never the secret). */
export class ServiceKeyRefusal extends ConnectError {
  constructor(
    message: string,
    code: Code,
    readonly keyId: string,
  ) {
    super(message, code);
  }
}

/** Who is calling DeploymentService: a key, the deployment names it may use, and its limits. */
export interface ServicePrincipal {
  keyId: string;
  deployments: ReadonlySet<string>;
  limits: KeyLimits;
}

export const noLimits: KeyLimits = { rpm: null, tpm: null, dailyTokens: null, monthlyTokens: null };

/** Pure: a key's limits as stored. */
export function limitsOf(row: Pick<ServiceKey, "rpm" | "tpm" | "dailyTokens" | "monthlyTokens">): KeyLimits {
  return {
    rpm: row.rpm,
    tpm: row.tpm,
    dailyTokens: row.dailyTokens === null ? null : Number(row.dailyTokens),
    monthlyTokens: row.monthlyTokens === null ? null : Number(row.monthlyTokens),
  };
}

/** Pure: limits within their bounds, or invalid_argument naming the one that is not. */
export function checkLimits(l: KeyLimits): void {
  const bounds: [keyof KeyLimits, string, number][] = [
    ["rpm", "requests_per_minute", 1_000_000],
    ["tpm", "tokens_per_minute", 1_000_000_000],
    ["dailyTokens", "daily_tokens", 2 ** 53],
    ["monthlyTokens", "monthly_tokens", 2 ** 53],
  ];
  for (const [key, field, most] of bounds) {
    const v = l[key];
    if (v !== null && (!Number.isSafeInteger(v) || v < 1 || v > most)) {
      throw new ConnectError(`limits.${field}: from 1 to ${most}, or 0 for none`, Code.InvalidArgument);
    }
  }
}

const limitColumns = (l: KeyLimits) => ({
  rpm: l.rpm,
  tpm: l.tpm,
  dailyTokens: l.dailyTokens === null ? null : BigInt(l.dailyTokens),
  monthlyTokens: l.monthlyTokens === null ? null : BigInt(l.monthlyTokens),
});

/** The audit's words for a set of limits. */
const limitsDetail = (l: KeyLimits) =>
  Object.fromEntries(Object.entries(l).map(([k, v]) => [k, v === null ? "none" : String(v)])) as Record<string, string>;

export interface ServiceKeysDeps {
  prisma: PrismaClient;
  /** The database straight through its driver, for the read on the request path. */
  direct: DirectQuery;
  clock: Clock;
  /** How long a looked-up key is trusted before it is read again (default 5 s). */
  cacheMs?: number;
  /** While the database cannot be reached, how long after its last read a key is still trusted (default 0: not beyond `cacheMs`). */
  outageTrustMs?: number;
  /** Knows whether the database is lost, and hears of the failures that say so. */
  outage?: OutageWatch;
}

/** A key as read, with what every request of it needs made once per read rather than per request. */
interface KnownKey {
  row: ServiceKey;
  secretHash: Buffer;
  principal: ServicePrincipal;
}

export class ServiceKeys {
  private readonly cache: LookupCache<KnownKey | undefined>;

  constructor(private readonly deps: ServiceKeysDeps) {
    const trustMs = deps.outageTrustMs ?? 0;
    this.cache = new LookupCache(deps.clock, deps.cacheMs ?? 5_000, trustMs > 0 ? staleWhileDatabaseAway(trustMs, deps.outage) : undefined);
  }

  async create(
    input: { name: string; deployments: string[]; ttlMs: number | undefined; limits?: KeyLimits; ownerUserId?: string | undefined },
    correlationId: string,
    by: AuditActor,
  ): Promise<{ row: ServiceKey; secret: string }> {
    checkServiceKeyInput(input.name, input.deployments);
    const limits = input.limits ?? noLimits;
    checkLimits(limits);
    const secret = newServiceKeySecret();
    const now = this.deps.clock.now();
    const deployments = [...new Set(input.deployments)].sort();
    const row = await this.deps.prisma.$transaction(async (tx) => {
      const created = await tx.serviceKey.create({
        data: {
          id: randomUUID(),
          name: input.name,
          prefix: secret.slice(0, secretPrefix.length + 8),
          secretHash: hashServiceKeySecret(secret),
          deployments,
          createdAt: new Date(now),
          expiresAt: input.ttlMs === undefined ? null : new Date(now + input.ttlMs),
          ownerUserId: input.ownerUserId ?? null,
          ...limitColumns(limits),
        },
      });
      await recordAudit(
        tx,
        {
          ...by,
          action: "service_key.created",
          targetType: "service_key",
          targetId: created.id,
          correlationId,
          details: {
            name: created.name,
            deployments: deployments.join(","),
            expiresAt: created.expiresAt?.toISOString() ?? "never",
            ...limitsDetail(limits),
          },
        },
        new Date(now),
      );
      return created;
    });
    return { row, secret };
  }

  /** With each key's owner; `owner` (a user's id or email) keeps only that user's keys. */
  list(
    offset: number,
    take: number,
    includeRevoked: boolean,
    owner?: string,
  ): Promise<(ServiceKey & { owner: { id: string; email: string } | null })[]> {
    const byOwner = owner ? (isUuid(owner) ? { ownerUserId: owner } : { owner: { email: owner } }) : {};
    return this.deps.prisma.serviceKey.findMany({
      where: { ...(includeRevoked ? {} : { revokedAt: null }), ...byOwner },
      include: { owner: { select: { id: true, email: true } } },
      orderBy: [{ createdAt: "desc" }, { id: "asc" }],
      skip: offset,
      take,
    });
  }

  async revoke(id: string, reason: string, correlationId: string, by: AuditActor): Promise<ServiceKey> {
    // The edge checks the UUID's form when one is given; none at all is the caller's mistake too.
    if (id === "") throw new ConnectError("id: is required: the service key's id", Code.InvalidArgument);
    const now = new Date(this.deps.clock.now());
    const row = await this.deps.prisma.$transaction(async (tx) => {
      const found = await tx.serviceKey.findUnique({ where: { id } });
      if (found === null) throw new ConnectError(`no service key ${id}`, Code.NotFound);
      if (found.revokedAt !== null) return found;
      const revoked = await tx.serviceKey.update({ where: { id }, data: { revokedAt: now } });
      await recordAudit(
        tx,
        {
          ...by,
          action: "service_key.revoked",
          targetType: "service_key",
          targetId: id,
          correlationId,
          details: reason === "" ? {} : { reason },
        },
        now,
      );
      return revoked;
    });
    this.cache.delete(row.secretHash);
    return row;
  }

  /** Sets a key's limits (all of them), audited; this replica sees them at once, others within the key cache's life. */
  async updateLimits(id: string, limits: KeyLimits, correlationId: string, by: AuditActor): Promise<ServiceKey> {
    if (id === "") throw new ConnectError("id: is required: the service key's id", Code.InvalidArgument);
    checkLimits(limits);
    const now = new Date(this.deps.clock.now());
    const row = await this.deps.prisma.$transaction(async (tx) => {
      const found = await tx.serviceKey.findUnique({ where: { id } });
      if (found === null) throw new ConnectError(`no service key ${id}`, Code.NotFound);
      const updated = await tx.serviceKey.update({ where: { id }, data: limitColumns(limits) });
      await recordAudit(
        tx,
        {
          ...by,
          action: "service_key.limits_changed",
          targetType: "service_key",
          targetId: id,
          correlationId,
          details: limitsDetail(limits),
        },
        now,
      );
      return updated;
    });
    this.cache.delete(row.secretHash);
    return row;
  }

  /**
   * The principal of a presented secret; unauthenticated (with a reason fit for the caller) when
   * it is malformed, unknown, revoked or expired.
   */
  async authenticate(secret: string): Promise<ServicePrincipal> {
    if (!secretPattern.test(secret)) throw new ConnectError("service key malformed", Code.Unauthenticated);
    const secretHash = hashServiceKeySecret(secret);
    const key = await this.lookup(secretHash);
    // Constant-time, as for every secret; the lookup by hash already matched.
    if (key === undefined || !timingSafeEqual(key.secretHash, Buffer.from(secretHash, "hex"))) {
      throw new ConnectError("service key unknown", Code.Unauthenticated);
    }
    const state = serviceKeyState(key.row, this.deps.clock.now());
    if (state !== "active") throw new ServiceKeyRefusal(`service key ${state}`, Code.Unauthenticated, key.row.id);
    return key.principal;
  }

  /** Records a refusal of a known key in the audit log (the caller flood-limits this). */
  async auditRefusal(keyId: string, reason: string, correlationId: string): Promise<void> {
    await recordAudit(
      this.deps.prisma,
      {
        actor: `service_key:${keyId}`,
        action: "service_key.refused",
        targetType: "service_key",
        targetId: keyId,
        correlationId,
        details: { reason },
      },
      new Date(this.deps.clock.now()),
    );
  }

  private lookup(secretHash: string): Promise<KnownKey | undefined> {
    return this.cache.get(secretHash, async () => {
      const [found] = await this.deps.direct<KeyRow>(keyBySecretHash, [secretHash]);
      if (found === undefined) return undefined;
      const row = keyOf(found);
      const principal = { keyId: row.id, deployments: new Set(row.deployments), limits: Object.freeze(limitsOf(row)) };
      return { row, secretHash: Buffer.from(row.secretHash, "hex"), principal };
    });
  }
}

// A request whose key's cached copy has expired (every 5 s per key) reads it on its own path, so
// the read goes straight on the driver (../db/direct.ts): through Prisma it took 0.7-0.9 ms of the
// event loop on PGlite, against 0.15 ms for the whole authentication here. Columns are named (a
// newer replica may add one); int8 goes as text, which both drivers parse alike.
const keyBySecretHash: DirectStatement = {
  name: "mf_service_key_by_hash",
  text: `SELECT ${Object.values(Prisma.ServiceKeyScalarFieldEnum)
    .map((column) => (column === "dailyTokens" || column === "monthlyTokens" ? `"${column}"::text AS "${column}"` : `"${column}"`))
    .join(", ")}
  FROM "ServiceKey" WHERE "secretHash" = $1`,
};

type KeyRow = Omit<ServiceKey, "dailyTokens" | "monthlyTokens"> & { dailyTokens: string | null; monthlyTokens: string | null };

function keyOf(row: KeyRow): ServiceKey {
  return {
    ...row,
    dailyTokens: row.dailyTokens === null ? null : BigInt(row.dailyTokens),
    monthlyTokens: row.monthlyTokens === null ? null : BigInt(row.monthlyTokens),
  };
}
