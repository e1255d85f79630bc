// Control-plane configuration, read from environment variables only. Pure: `loadConfig(env)` never
// touches the process, so tests build configs the same way `main` does.
import { parseDuration } from "../common/duration.js";
import { parseByteSize } from "../common/byte-size.js";
import { parseListenAddress, type ListenAddress } from "../common/listen-address.js";
import { parseVersion } from "./agent-version.js";
import { defaultMinAgentVersion } from "./version.js";
import { parseSsoConfig, SsoConfigError, type SsoConfig } from "./sso-config.js";

export interface Config {
  listenAddress: string;
  port: number;
  /** Names (DNS or IP) the server certificate covers. */
  serverNames: string[];
  /** The URL agents dial, used in join commands; unset: the first server name and the bound port. */
  publicUrl: string | undefined;
  /** The URL the other replicas reach this one on directly (forwarded invokes); undefined: the first server name on the bound port. */
  replicaUrl: string | undefined;
  dataDir: string;
  certsDir: string;
  databaseUrl: string | undefined;
  /** PostgreSQL: statement texts kept prepared per pooled connection (0: none, for a pooler that cannot carry them). */
  preparedStatements: number;
  /** Undefined: the admin API fails closed. */
  operatorApiKey: string | undefined;
  /** The read-only operator key (the viewer role); undefined: no read-only key. */
  operatorReadonlyKey: string | undefined;
  /** Whether the static operator keys are accepted at all (break-glass); off: only users. */
  breakGlass: boolean;
  /** Single sign-on through an OpenID Connect provider; undefined: none. */
  sso: SsoConfig | undefined;
  /** How long a web console sign-in lasts. */
  consoleSessionTtlMs: number;
  /** The web console's built files (`npm run build:ui`), served under /ui/. */
  uiDir: string;
  logLevel: string;
  enrollmentTokenTtlMs: number;
  credentialTtlMs: number;
  renewRemainingFraction: number;
  heartbeatIntervalMs: number;
  telemetryIntervalMs: number;
  inventoryIntervalMs: number;
  staleAfterMs: number;
  offlineAfterMs: number;
  /** How long a node's session may be closed before its deployment replicas are placed elsewhere. */
  replaceAfterMs: number;
  maxFutureSkewMs: number;
  livenessFlushIntervalMs: number;
  reconcileIntervalMs: number;
  leaseDurationMs: number;
  defaultMaxAttempts: number;
  reclaimGraceMs: number;
  approvedRoots: string[];
  shutdownGraceMs: number;
  /** How long an idle HTTP/1.1 connection (the OpenAI SDKs' kind) is kept for its next request. */
  http1IdleTimeoutMs: number;
  /** The most of a streamed answer held for a caller that has not read it before its request ends as client_stalled. */
  invokeMaxUnreadBytes: number;
  /** gRPC Sessions on the raw HTTP/2 stream with the heartbeat wire codec (docs/architecture.md, fast paths); off: Connect's generic path. */
  sessionFastPath: boolean;
  /** While the database cannot be reached, how long after its last read a service key is still accepted (0: not beyond its 5 s cache). */
  serviceKeyOutageTrustMs: number;
  /** How often service clients' usage is added to the database; a kill -9 loses at most this much. */
  usageFlushMs: number;
  /** Where the artifact store keeps its content (default `<dataDir>/artifacts`). */
  artifactDir: string;
  /** Where the Prometheus endpoint listens (plain HTTP); undefined: no endpoint. */
  metricsAddress: ListenAddress | undefined;
  /** The oldest agent version accepted at Hello (docs/protocol.md, "Version skew policy"). */
  minAgentVersion: string;
  /** An Ed25519 public key (PEM file) agent releases must be signed with; undefined: unsigned releases. */
  agentReleaseKeyFile: string | undefined;
  /** How often each replica reports its deployments' load and the leader decides their replicas. */
  autoscaleIntervalMs: number;
  /** The window the autoscaler averages the load over. */
  autoscaleWindowMs: number;
  /** Requests held per deployment on one replica while a replica loads; more are refused. */
  coldStartMaxHeld: number;
  /** How often a held stream on the OpenAI API is sent an SSE comment. */
  coldStartKeepAliveMs: number;
  /** A replica is idle, and may be evicted to make room, once its deployment had no request for this long. */
  evictIdleAfterMs: number;
  /** Whether requests go to the replica that holds their prompt's head (else by load alone). */
  prefixRouting: boolean;
  /** The prefix index's memory per deployment on this replica. */
  prefixIndexBudgetBytes: number;
  /** Requests beyond the least loaded replica's at which the replica holding a prompt's prefix is passed over. */
  prefixOverloadMargin: number;
}

export class ConfigError extends Error {
  override name = "ConfigError";
}

type Env = Record<string, string | undefined>;

/** One row per variable: docs/configuration.md states the same defaults (test/integration/configuration.test.ts). */
export const defaults = {
  MODELFORGE_LISTEN_ADDRESS: "127.0.0.1",
  MODELFORGE_PORT: "8443",
  MODELFORGE_SERVER_NAMES: "localhost,127.0.0.1",
  MODELFORGE_DATA_DIR: "./data",
  MODELFORGE_CERTS_DIR: "./certs",
  MODELFORGE_LOG_LEVEL: "info",
  MODELFORGE_DATABASE_PREPARED_STATEMENTS: "100",
  MODELFORGE_ENROLLMENT_TOKEN_TTL: "10m",
  MODELFORGE_CREDENTIAL_TTL: "30d",
  MODELFORGE_RENEW_REMAINING_FRACTION: "0.33",
  MODELFORGE_HEARTBEAT_INTERVAL: "10s",
  MODELFORGE_TELEMETRY_INTERVAL: "15s",
  MODELFORGE_INVENTORY_INTERVAL: "5m",
  MODELFORGE_STALE_AFTER: "30s",
  MODELFORGE_REPLACE_AFTER: "10s",
  MODELFORGE_OFFLINE_AFTER: "90s",
  MODELFORGE_MAX_FUTURE_SKEW: "5m",
  MODELFORGE_LIVENESS_FLUSH_INTERVAL: "1s",
  MODELFORGE_RECONCILE_INTERVAL: "1s",
  MODELFORGE_LEASE_DURATION: "2m",
  MODELFORGE_MAX_ATTEMPTS: "5",
  MODELFORGE_RECLAIM_GRACE: "60s",
  MODELFORGE_APPROVED_ROOTS: "/var/lib/modelforge/artifacts",
  MODELFORGE_SHUTDOWN_GRACE: "5s",
  MODELFORGE_HTTP1_IDLE_TIMEOUT: "60s",
  MODELFORGE_INVOKE_MAX_UNREAD: "1MiB",
  MODELFORGE_SESSION_FAST_PATH: "on",
  MODELFORGE_SERVICE_KEY_OUTAGE_TRUST: "5m",
  MODELFORGE_USAGE_FLUSH: "5s",
  MODELFORGE_AUTOSCALE_INTERVAL: "5s",
  MODELFORGE_AUTOSCALE_WINDOW: "30s",
  MODELFORGE_COLD_START_MAX_HELD: "100",
  MODELFORGE_COLD_START_KEEPALIVE: "5s",
  MODELFORGE_EVICT_IDLE_AFTER: "2m",
  MODELFORGE_PREFIX_ROUTING: "on",
  MODELFORGE_PREFIX_INDEX_BUDGET: "8MiB",
  MODELFORGE_PREFIX_OVERLOAD_MARGIN: "3",
  MODELFORGE_BREAK_GLASS: "on",
  MODELFORGE_CONSOLE_SESSION_TTL: "8h",
  MODELFORGE_MIN_AGENT_VERSION: defaultMinAgentVersion,
} as const;

type Name = keyof typeof defaults;

/** Reads one variable each, in its type, or throws a ConfigError naming it. */
class Variables {
  constructor(private readonly env: Env) {}

  get(name: Name): string {
    const v = this.env[name];
    return v === undefined || v.trim() === "" ? defaults[name] : v.trim();
  }

  duration(name: Name): number {
    return this.parsed(name, parseDuration);
  }

  durationAtMost(name: Name, maxMs: number): number {
    const ms = this.duration(name);
    if (ms > maxMs) throw new ConfigError(`${name}: at most ${maxMs / 3_600_000}h, got "${this.get(name)}"`);
    return ms;
  }

  /** "0" turns off what the duration allows; at most `maxMs`. */
  durationOrOff(name: Name, maxMs: number): number {
    return this.get(name) === "0" ? 0 : this.durationAtMost(name, maxMs);
  }

  integer(name: Name, min: number, max: number): number {
    const raw = this.get(name);
    const n = Number(raw);
    if (!Number.isInteger(n) || n < min || n > max)
      throw new ConfigError(`${name}: expected an integer from ${min} to ${max}, got "${raw}"`);
    return n;
  }

  byteSize(name: Name, min: number, max: number): number {
    const bytes = this.parsed(name, parseByteSize);
    if (bytes < min || bytes > max)
      throw new ConfigError(`${name}: expected from ${min} bytes to ${max / 1024 ** 2}MiB, got "${this.get(name)}"`);
    return bytes;
  }

  onOff(name: Name): boolean {
    const value = this.get(name);
    if (value !== "on" && value !== "off") throw new ConfigError(`${name}: expected on or off, got "${value}"`);
    return value === "on";
  }

  list(name: Name): string[] {
    return this.get(name)
      .split(",")
      .map((s) => s.trim())
      .filter((s) => s !== "");
  }

  private parsed(name: Name, parse: (text: string) => number): number {
    try {
      return parse(this.get(name));
    } catch (err) {
      throw new ConfigError(`${name}: ${(err as Error).message}`);
    }
  }
}

export function loadConfig(env: Env): Config {
  const v = new Variables(env);
  const serverNames = v.list("MODELFORGE_SERVER_NAMES");
  if (serverNames.length === 0) throw new ConfigError("MODELFORGE_SERVER_NAMES: at least one name is needed");
  const fraction = Number(v.get("MODELFORGE_RENEW_REMAINING_FRACTION"));
  if (!(fraction > 0 && fraction < 1)) throw new ConfigError("MODELFORGE_RENEW_REMAINING_FRACTION: expected a number between 0 and 1");
  const databaseUrl = env.DATABASE_URL?.trim() || undefined;
  if (databaseUrl !== undefined && !/^postgres(ql)?:\/\//.test(databaseUrl))
    throw new ConfigError("DATABASE_URL: expected a postgresql:// URL");
  const config: Config = {
    listenAddress: v.get("MODELFORGE_LISTEN_ADDRESS"),
    port: v.integer("MODELFORGE_PORT", 0, 65535),
    serverNames,
    publicUrl: env.MODELFORGE_PUBLIC_URL?.trim() || undefined,
    replicaUrl: httpsUrl(env, "MODELFORGE_REPLICA_URL"),
    dataDir: v.get("MODELFORGE_DATA_DIR"),
    certsDir: v.get("MODELFORGE_CERTS_DIR"),
    databaseUrl,
    preparedStatements: v.integer("MODELFORGE_DATABASE_PREPARED_STATEMENTS", 0, 10_000),
    operatorApiKey: env.MODELFORGE_OPERATOR_API_KEY?.trim() || undefined,
    operatorReadonlyKey: env.MODELFORGE_OPERATOR_READONLY_KEY?.trim() || undefined,
    breakGlass: v.onOff("MODELFORGE_BREAK_GLASS"),
    sso: ssoOf(env),
    consoleSessionTtlMs: v.durationAtMost("MODELFORGE_CONSOLE_SESSION_TTL", 7 * 86_400_000),
    uiDir: env.MODELFORGE_UI_DIR?.trim() || "./ui/dist",
    logLevel: v.get("MODELFORGE_LOG_LEVEL"),
    enrollmentTokenTtlMs: v.duration("MODELFORGE_ENROLLMENT_TOKEN_TTL"),
    credentialTtlMs: v.duration("MODELFORGE_CREDENTIAL_TTL"),
    renewRemainingFraction: fraction,
    heartbeatIntervalMs: v.duration("MODELFORGE_HEARTBEAT_INTERVAL"),
    telemetryIntervalMs: v.duration("MODELFORGE_TELEMETRY_INTERVAL"),
    inventoryIntervalMs: v.duration("MODELFORGE_INVENTORY_INTERVAL"),
    staleAfterMs: v.duration("MODELFORGE_STALE_AFTER"),
    offlineAfterMs: v.duration("MODELFORGE_OFFLINE_AFTER"),
    replaceAfterMs: v.duration("MODELFORGE_REPLACE_AFTER"),
    maxFutureSkewMs: v.duration("MODELFORGE_MAX_FUTURE_SKEW"),
    livenessFlushIntervalMs: v.duration("MODELFORGE_LIVENESS_FLUSH_INTERVAL"),
    reconcileIntervalMs: v.duration("MODELFORGE_RECONCILE_INTERVAL"),
    leaseDurationMs: v.duration("MODELFORGE_LEASE_DURATION"),
    defaultMaxAttempts: v.integer("MODELFORGE_MAX_ATTEMPTS", 1, 100),
    reclaimGraceMs: v.duration("MODELFORGE_RECLAIM_GRACE"),
    approvedRoots: v.list("MODELFORGE_APPROVED_ROOTS"),
    shutdownGraceMs: v.duration("MODELFORGE_SHUTDOWN_GRACE"),
    // A timer: Node fires one set past 2^31 - 1 ms (24.8 days) after 1 ms instead.
    http1IdleTimeoutMs: v.durationAtMost("MODELFORGE_HTTP1_IDLE_TIMEOUT", 3_600_000),
    invokeMaxUnreadBytes: v.byteSize("MODELFORGE_INVOKE_MAX_UNREAD", 4096, 64 * 1024 ** 2),
    sessionFastPath: v.onOff("MODELFORGE_SESSION_FAST_PATH"),
    serviceKeyOutageTrustMs: v.durationOrOff("MODELFORGE_SERVICE_KEY_OUTAGE_TRUST", 24 * 3_600_000),
    usageFlushMs: v.duration("MODELFORGE_USAGE_FLUSH"),
    artifactDir: env.MODELFORGE_ARTIFACT_DIR?.trim() || `${v.get("MODELFORGE_DATA_DIR").replace(/\/+$/, "")}/artifacts`,
    metricsAddress: optionalAddress(env, "MODELFORGE_METRICS_ADDRESS"),
    minAgentVersion: v.get("MODELFORGE_MIN_AGENT_VERSION"),
    agentReleaseKeyFile: env.MODELFORGE_AGENT_RELEASE_KEY?.trim() || undefined,
    autoscaleIntervalMs: v.durationAtMost("MODELFORGE_AUTOSCALE_INTERVAL", 3_600_000),
    autoscaleWindowMs: v.durationAtMost("MODELFORGE_AUTOSCALE_WINDOW", 3_600_000),
    coldStartMaxHeld: v.integer("MODELFORGE_COLD_START_MAX_HELD", 1, 100_000),
    coldStartKeepAliveMs: v.durationAtMost("MODELFORGE_COLD_START_KEEPALIVE", 60_000),
    evictIdleAfterMs: v.duration("MODELFORGE_EVICT_IDLE_AFTER"),
    prefixRouting: v.onOff("MODELFORGE_PREFIX_ROUTING"),
    prefixIndexBudgetBytes: v.byteSize("MODELFORGE_PREFIX_INDEX_BUDGET", 1024, 1024 ** 3),
    prefixOverloadMargin: v.integer("MODELFORGE_PREFIX_OVERLOAD_MARGIN", 0, 10_000),
  };
  checkConfig(config);
  return config;
}

function ssoOf(env: Env): SsoConfig | undefined {
  try {
    return parseSsoConfig(env);
  } catch (err) {
    if (err instanceof SsoConfigError) throw new ConfigError(err.message);
    throw err;
  }
}

/** What holds between variables. */
function checkConfig(config: Config): void {
  if (parseVersion(config.minAgentVersion) === undefined) {
    throw new ConfigError(`MODELFORGE_MIN_AGENT_VERSION: expected a version such as 1.4.0, got "${config.minAgentVersion}"`);
  }
  if (config.operatorApiKey !== undefined && config.operatorApiKey.length < 16) {
    throw new ConfigError("MODELFORGE_OPERATOR_API_KEY: use at least 16 characters");
  }
  if (config.operatorReadonlyKey !== undefined && config.operatorReadonlyKey.length < 16) {
    throw new ConfigError("MODELFORGE_OPERATOR_READONLY_KEY: use at least 16 characters");
  }
  if (config.operatorReadonlyKey !== undefined && config.operatorReadonlyKey === config.operatorApiKey) {
    throw new ConfigError("MODELFORGE_OPERATOR_READONLY_KEY: must differ from MODELFORGE_OPERATOR_API_KEY");
  }
  if (!config.breakGlass && config.sso === undefined) {
    throw new ConfigError("MODELFORGE_BREAK_GLASS=off needs single sign-on (MODELFORGE_OIDC_ISSUER): otherwise no one could sign in");
  }
  if (config.autoscaleWindowMs < config.autoscaleIntervalMs) {
    throw new ConfigError("MODELFORGE_AUTOSCALE_WINDOW must be at least MODELFORGE_AUTOSCALE_INTERVAL");
  }
  if (config.offlineAfterMs <= config.staleAfterMs) {
    throw new ConfigError("MODELFORGE_OFFLINE_AFTER must be longer than MODELFORGE_STALE_AFTER");
  }
}

/** The URL agents dial: the configured one, else the first server name on the bound port. */
export function publicUrlOf(config: Pick<Config, "publicUrl" | "serverNames">, boundPort: number): string {
  if (config.publicUrl !== undefined) return config.publicUrl;
  const name = config.serverNames[0]!;
  return `https://${name.includes(":") ? `[${name}]` : name}:${boundPort}`;
}

/** This replica's own address for the others: never the public URL, which may be a load balancer in front of all of them. */
export function replicaUrlOf(config: Pick<Config, "replicaUrl" | "serverNames">, boundPort: number): string {
  return config.replicaUrl ?? publicUrlOf({ publicUrl: undefined, serverNames: config.serverNames }, boundPort);
}

/** An optional https:// URL with a host and nothing after the port. */
function httpsUrl(env: Env, name: string): string | undefined {
  const text = env[name]?.trim();
  if (!text) return undefined;
  let url: URL;
  try {
    url = new URL(text);
  } catch {
    throw new ConfigError(`${name}: expected a URL such as https://cp-1.internal:8443, got "${text}"`);
  }
  if (url.protocol !== "https:" || url.hostname === "" || url.pathname !== "/" || url.search !== "" || url.username !== "") {
    throw new ConfigError(`${name}: expected https://host:port with nothing after it, got "${text}"`);
  }
  return url.origin;
}

/** An optional listen address: unset or empty means off; a bare port means loopback. */
function optionalAddress(env: Env, name: string): ListenAddress | undefined {
  const text = env[name]?.trim();
  if (!text) return undefined;
  try {
    return parseListenAddress(text);
  } catch (err) {
    throw new ConfigError(`${name}: ${(err as Error).message}`);
  }
}
