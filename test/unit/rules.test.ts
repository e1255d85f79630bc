// Small pure rules: configuration, durations, correlation ids, codes, backoff and renewal timing.
import { describe, expect, it } from "vitest";
import { loadConfig, ConfigError, publicUrlOf, replicaUrlOf } from "../../server/config.js";
import { parseDuration } from "../../common/duration.js";
import { parseByteSize } from "../../common/byte-size.js";
import { correlationIdFrom } from "../../server/observability/correlation.js";
import { codeName } from "../../common/codes.js";
import { Code } from "@connectrpc/connect";
import { secretsEqual, breakGlassRole } from "../../server/identity/admin-token.js";
import { tokenState } from "../../server/identity/enrollment/token.js";
import { backoffDelay, nextRunAt, renewalDue } from "../../agent/session/timing.js";

describe("configuration", () => {
  it("has working defaults", () => {
    const c = loadConfig({});
    expect(c.port).toBe(8443);
    expect(c.listenAddress).toBe("127.0.0.1");
    expect(c.serverNames).toEqual(["localhost", "127.0.0.1"]);
    expect(publicUrlOf(c, 8443)).toBe("https://localhost:8443");
    expect(publicUrlOf({ ...c, serverNames: ["::1"] }, 9000)).toBe("https://[::1]:9000");
    expect(publicUrlOf({ ...c, publicUrl: "https://cp.example:443" }, 9000)).toBe("https://cp.example:443");
    // A replica is reached directly, never through the public URL (a load balancer in front of all).
    expect(replicaUrlOf({ ...c, publicUrl: "https://lb.example:443" } as typeof c, 9000)).toBe("https://localhost:9000");
    expect(replicaUrlOf(loadConfig({ MODELFORGE_REPLICA_URL: "https://cp-1.internal:8443" }), 9000)).toBe("https://cp-1.internal:8443");
    expect(c.operatorApiKey).toBeUndefined();
    expect(c.staleAfterMs).toBe(30_000);
    expect(c.offlineAfterMs).toBe(90_000);
    expect(c.enrollmentTokenTtlMs).toBe(600_000);
    expect(c.credentialTtlMs).toBe(30 * 86_400_000);
    expect(c.leaseDurationMs).toBe(120_000);
    expect(c.defaultMaxAttempts).toBe(5);
    expect(c.preparedStatements).toBe(100);
    expect(loadConfig({ MODELFORGE_DATABASE_PREPARED_STATEMENTS: "0" }).preparedStatements).toBe(0);
    expect(c.serviceKeyOutageTrustMs).toBe(300_000);
    expect(loadConfig({ MODELFORGE_SERVICE_KEY_OUTAGE_TRUST: "0" }).serviceKeyOutageTrustMs).toBe(0);
    expect(loadConfig({ MODELFORGE_SERVICE_KEY_OUTAGE_TRUST: "90s" }).serviceKeyOutageTrustMs).toBe(90_000);
    expect(c.http1IdleTimeoutMs).toBe(60_000);
  });
  it.each([
    [{ MODELFORGE_PORT: "99999" }, /MODELFORGE_PORT/],
    [{ MODELFORGE_STALE_AFTER: "10" }, /MODELFORGE_STALE_AFTER: expected a duration/],
    [{ MODELFORGE_STALE_AFTER: "2m", MODELFORGE_OFFLINE_AFTER: "1m" }, /must be longer/],
    [{ MODELFORGE_OPERATOR_API_KEY: "short" }, /at least 16/],
    [{ DATABASE_URL: "mysql://x" }, /postgresql:\/\//],
    [{ MODELFORGE_RENEW_REMAINING_FRACTION: "1.5" }, /between 0 and 1/],
    [{ MODELFORGE_SERVER_NAMES: " , " }, /at least one name/],
    [{ MODELFORGE_REPLICA_URL: "http://cp-1:8443" }, /MODELFORGE_REPLICA_URL: expected https/],
    [{ MODELFORGE_REPLICA_URL: "https://cp-1:8443/path" }, /nothing after it/],
    [{ MODELFORGE_REPLICA_URL: "cp-1:8443:x" }, /MODELFORGE_REPLICA_URL/],
    [{ MODELFORGE_DATABASE_PREPARED_STATEMENTS: "-1" }, /MODELFORGE_DATABASE_PREPARED_STATEMENTS: expected an integer from 0 to 10000/],
    [{ MODELFORGE_DATABASE_PREPARED_STATEMENTS: "lots" }, /MODELFORGE_DATABASE_PREPARED_STATEMENTS/],
    [{ MODELFORGE_SERVICE_KEY_OUTAGE_TRUST: "-1s" }, /MODELFORGE_SERVICE_KEY_OUTAGE_TRUST: expected a duration/],
    [{ MODELFORGE_SERVICE_KEY_OUTAGE_TRUST: "5" }, /MODELFORGE_SERVICE_KEY_OUTAGE_TRUST: expected a duration/],
    [{ MODELFORGE_SERVICE_KEY_OUTAGE_TRUST: "2d" }, /MODELFORGE_SERVICE_KEY_OUTAGE_TRUST: at most 24h/],
    [{ MODELFORGE_HTTP1_IDLE_TIMEOUT: "0" }, /MODELFORGE_HTTP1_IDLE_TIMEOUT: expected a duration/],
    [{ MODELFORGE_HTTP1_IDLE_TIMEOUT: "30d" }, /MODELFORGE_HTTP1_IDLE_TIMEOUT: at most 1h/],
    [{ MODELFORGE_INVOKE_MAX_UNREAD: "1MB" }, /MODELFORGE_INVOKE_MAX_UNREAD: expected a size/],
    [{ MODELFORGE_INVOKE_MAX_UNREAD: "1KiB" }, /MODELFORGE_INVOKE_MAX_UNREAD: expected from 4096 bytes to 64MiB/],
    [{ MODELFORGE_INVOKE_MAX_UNREAD: "65MiB" }, /MODELFORGE_INVOKE_MAX_UNREAD: expected from 4096 bytes to 64MiB/],
    [{ MODELFORGE_PREFIX_ROUTING: "maybe" }, /MODELFORGE_PREFIX_ROUTING/],
    [{ MODELFORGE_PREFIX_INDEX_BUDGET: "512" }, /MODELFORGE_PREFIX_INDEX_BUDGET: expected from 1024 bytes to 1024MiB/],
    [{ MODELFORGE_PREFIX_OVERLOAD_MARGIN: "-1" }, /MODELFORGE_PREFIX_OVERLOAD_MARGIN/],
  ])("refuses %o", (env, message) => {
    expect(() => loadConfig(env)).toThrow(ConfigError);
    expect(() => loadConfig(env)).toThrow(message);
  });
});

describe("durations", () => {
  it.each([
    ["250ms", 250],
    ["10s", 10_000],
    ["1.5s", 1500],
    ["5m", 300_000],
    ["2h", 7_200_000],
    ["30d", 2_592_000_000],
  ])("%s = %d ms", (text, ms) => expect(parseDuration(text)).toBe(ms));
  it.each(["", "10", "s", "-1s", "0s", "1w", "1 s"])("refuses %j", (text) => expect(() => parseDuration(text)).toThrow());
});

describe("sizes", () => {
  it.each([
    ["65536", 65_536],
    ["64KiB", 65_536],
    ["1MiB", 1_048_576],
    ["2GiB", 2_147_483_648],
  ])("%s = %d bytes", (text, bytes) => expect(parseByteSize(text)).toBe(bytes));
  it.each(["", "0", "1MB", "1 MiB", "-1", "1.5MiB", "99999999999999999GiB"])("refuses %j", (text) =>
    expect(() => parseByteSize(text)).toThrow(),
  );
  it("reads prefix routing's settings: on, 8 MiB per deployment, a margin of 3 by default", () => {
    expect(loadConfig({})).toMatchObject({ prefixRouting: true, prefixIndexBudgetBytes: 8 * 1_048_576, prefixOverloadMargin: 3 });
    expect(
      loadConfig({ MODELFORGE_PREFIX_ROUTING: "off", MODELFORGE_PREFIX_INDEX_BUDGET: "64KiB", MODELFORGE_PREFIX_OVERLOAD_MARGIN: "0" }),
    ).toMatchObject({ prefixRouting: false, prefixIndexBudgetBytes: 65_536, prefixOverloadMargin: 0 });
  });
  it("reads MODELFORGE_INVOKE_MAX_UNREAD, 1 MiB by default", () => {
    expect(loadConfig({}).invokeMaxUnreadBytes).toBe(1_048_576);
    expect(loadConfig({ MODELFORGE_INVOKE_MAX_UNREAD: "16KiB" }).invokeMaxUnreadBytes).toBe(16_384);
  });
});

describe("correlation ids", () => {
  it("keeps a sane caller id and mints one otherwise", () => {
    expect(correlationIdFrom("abc-123")).toBe("abc-123");
    expect(correlationIdFrom(undefined)).toMatch(/^[0-9a-f-]{36}$/);
    expect(correlationIdFrom("has space")).toMatch(/^[0-9a-f-]{36}$/);
    expect(correlationIdFrom("x".repeat(200))).toMatch(/^[0-9a-f-]{36}$/);
    expect(correlationIdFrom("line\nbreak")).toMatch(/^[0-9a-f-]{36}$/);
  });
});

describe("codes", () => {
  it.each([
    [Code.InvalidArgument, "invalid_argument"],
    [Code.Unauthenticated, "unauthenticated"],
    [Code.PermissionDenied, "permission_denied"],
    [Code.Aborted, "aborted"],
    [Code.FailedPrecondition, "failed_precondition"],
  ])("%d is %s", (code, name) => {
    expect(codeName(code)).toBe(name);
  });
});

describe("admin token", () => {
  it("compares whole secrets of any length", () => {
    expect(secretsEqual("same-secret-value", "same-secret-value")).toBe(true);
    expect(secretsEqual("same-secret-value", "same-secret-valuf")).toBe(false);
    expect(secretsEqual("short", "same-secret-value")).toBe(false);
  });
  it("fails closed with no configured key", () => {
    const keys = { admin: "k".repeat(16), readOnly: "r".repeat(16) };
    expect(() => breakGlassRole("anything", { admin: undefined, readOnly: undefined })).toThrow(/MODELFORGE_OPERATOR_API_KEY/);
    expect(() => breakGlassRole("k".repeat(16), undefined)).toThrow(/MODELFORGE_BREAK_GLASS=off/);
    expect(() => breakGlassRole(null, keys)).toThrow(/missing/);
    expect(() => breakGlassRole("wrong", keys)).toThrow(/invalid admin token/);
    expect(breakGlassRole("k".repeat(16), keys)).toBe("admin");
    expect(breakGlassRole("r".repeat(16), keys)).toBe("viewer");
    expect(() => breakGlassRole("r".repeat(16), { admin: "k".repeat(16), readOnly: undefined })).toThrow(/invalid admin token/);
  });
});

describe("enrollment token state", () => {
  const now = new Date("2026-11-30T12:00:00Z");
  const at = (s: number) => new Date(now.getTime() + s * 1000);
  it.each([
    [{ usedAt: null, revokedAt: null, expiresAt: at(60) }, "active"],
    [{ usedAt: at(-1), revokedAt: null, expiresAt: at(60) }, "used"],
    [{ usedAt: null, revokedAt: at(-1), expiresAt: at(60) }, "revoked"],
    [{ usedAt: null, revokedAt: null, expiresAt: now }, "expired"],
    [{ usedAt: at(-5), revokedAt: null, expiresAt: at(-1) }, "used"],
  ])("%o is %s", (t, state) => expect(tokenState(t, now)).toBe(state));
});

describe("reconnect backoff", () => {
  it("grows exponentially up to the cap, with full jitter", () => {
    const top = () => 0.999999;
    expect(backoffDelay(0, 500, 30_000, top)).toBe(499);
    expect(backoffDelay(3, 500, 30_000, top)).toBe(3999);
    expect(backoffDelay(10, 500, 30_000, top)).toBe(29_999);
    expect(backoffDelay(1000, 500, 30_000, top)).toBe(29_999);
    expect(backoffDelay(5, 500, 30_000, () => 0)).toBe(0);
    const spread = new Set(Array.from({ length: 50 }, () => backoffDelay(6, 500, 30_000)));
    expect(spread.size).toBeGreaterThan(25);
  });
});

describe("renewal timing", () => {
  it.each([
    [0, 90, 10, 1 / 3, false],
    [0, 90, 59, 1 / 3, false],
    [0, 90, 60, 1 / 3, true],
    [0, 90, 89, 1 / 3, true],
    [0, 90, 100, 1 / 3, true],
  ])("issued %d, expires %d, at %d with share %d: due %s", (nb, na, now, f, due) => {
    expect(renewalDue(nb, na, now, f)).toBe(due);
  });
});

describe("periodic cadence", () => {
  const mid = () => 0.5;
  it.each([
    { name: "on time: one interval after it was due", dueAt: 1000, now: 1000, random: mid, want: 2000 },
    { name: "late: still one interval after it was due, not after it ran", dueAt: 1000, now: 1300, random: mid, want: 2000 },
    { name: "jitter's low edge", dueAt: 1000, now: 1000, random: () => 0, want: 1950 },
    { name: "jitter's high edge", dueAt: 1000, now: 1000, random: () => 1, want: 2050 },
    { name: "after a stall: no catching up, one interval from now on average", dueAt: 1000, now: 4500, random: mid, want: 5500 },
    { name: "after a stall, as soon as half an interval from now", dueAt: 1000, now: 4500, random: () => 0, want: 5000 },
    { name: "after a stall, as late as one and a half intervals from now", dueAt: 1000, now: 4500, random: () => 1, want: 6000 },
  ])("$name", ({ dueAt, now, random, want }) => {
    expect(nextRunAt(dueAt, now, 1000, 0.05, random)).toBe(want);
  });
});
