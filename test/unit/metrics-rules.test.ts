// The pure rules behind the metrics and CPU telemetry: listen addresses, closed label sets, query
// error kinds, job outcomes, and CPU utilisation from two counter readings.
import { describe, expect, it } from "vitest";
import { Code, ConnectError } from "@connectrpc/connect";
import { create } from "@bufbuild/protobuf";
import { parseListenAddress } from "../../common/listen-address.js";
import { queryErrorKind, rpcOutcome, sessionRefusalReason, sessionRefusalReasons } from "../../server/observability/metrics-rules.js";
import { jobOutcomeLabel } from "../../agent/metrics.js";
import { cpuUtilization, CpuSampler, type CpuTimes } from "../../agent/collectors/cpu.js";
import { loadConfig } from "../../server/config.js";
import { JobFailureCode, JobFailureSchema, JobResultSchema } from "../../gen/proto/modelforge/jobs/v1/jobs_pb.js";

describe("listen addresses", () => {
  it.each([
    ["9464", { host: "127.0.0.1", port: 9464 }],
    ["0", { host: "127.0.0.1", port: 0 }],
    ["127.0.0.1:9464", { host: "127.0.0.1", port: 9464 }],
    ["0.0.0.0:9464", { host: "0.0.0.0", port: 9464 }],
    ["localhost:9000", { host: "localhost", port: 9000 }],
    ["[::1]:9464", { host: "::1", port: 9464 }],
    [" 9464 ", { host: "127.0.0.1", port: 9464 }],
  ])("%s", (text, expected) => expect(parseListenAddress(text)).toEqual(expected));

  it.each(["", ":9464", "65536", "metrics.example.com:9464", "::1:9464", "[127.0.0.1]:9464", "1.2.3.4", "1.2.3.4:", "[::1]"])(
    "refuses %j",
    (text) => expect(() => parseListenAddress(text)).toThrow(/expected PORT, HOST:PORT/),
  );

  it("metrics are off unless MODELFORGE_METRICS_ADDRESS is set; a bad value names the variable", () => {
    expect(loadConfig({}).metricsAddress).toBeUndefined();
    expect(loadConfig({ MODELFORGE_METRICS_ADDRESS: "9464" }).metricsAddress).toEqual({ host: "127.0.0.1", port: 9464 });
    expect(() => loadConfig({ MODELFORGE_METRICS_ADDRESS: "somehost:1" })).toThrow(/^MODELFORGE_METRICS_ADDRESS: /);
  });
});

describe("label values come from closed sets", () => {
  it("every Connect code maps to a session refusal reason of the set", () => {
    const codes = Object.values(Code).filter((c): c is Code => typeof c === "number");
    for (const code of codes) expect(sessionRefusalReasons).toContain(sessionRefusalReason(code));
    expect(sessionRefusalReason(Code.PermissionDenied)).toBe("permission_denied");
    expect(sessionRefusalReason(Code.Canceled)).toBe("agent_left");
    expect(sessionRefusalReason(Code.DataLoss)).toBe("other");
  });

  it.each([
    [undefined, "ok"],
    [new ConnectError("no", Code.Unauthenticated), "unauthenticated"],
    [new ConnectError("slow down", Code.ResourceExhausted), "resource_exhausted"],
    [new ConnectError("?", Code.Unknown), "internal"],
    [Object.assign(new Error("connect ECONNREFUSED"), { code: "ECONNREFUSED" }), "unavailable"],
    [new Error("a bug"), "internal"],
  ])("rpc outcome of %s", (err, expected) => expect(rpcOutcome(err)).toBe(expected));

  const adapterError = (cause: object) => Object.assign(new Error("driver"), { name: "DriverAdapterError", cause });
  it.each([
    ["connection refused", Object.assign(new Error("x"), { code: "ECONNREFUSED" }), "unavailable"],
    ["PGlite closed", new Error("PGlite is closed"), "unavailable"],
    ["serialization failure", adapterError({ kind: "TransactionWriteConflict", originalCode: "40001" }), "conflict"],
    ["lock not available", adapterError({ kind: "postgres", code: "55P03" }), "conflict"],
    ["unique violation", adapterError({ kind: "UniqueConstraintViolation", originalCode: "23505" }), "constraint"],
    ["check violation", adapterError({ kind: "postgres", code: "23514" }), "constraint"],
    ["statement timeout", adapterError({ kind: "postgres", code: "57014" }), "timeout"],
    ["division by zero", adapterError({ kind: "postgres", code: "22012" }), "other"],
    ["not an error object", "boom", "other"],
  ])("query error kind: %s", (_what, err, expected) => expect(queryErrorKind(err)).toBe(expected));

  it.each([
    [{ kind: "result" as const, result: create(JobResultSchema) }, "succeeded"],
    [{ kind: "failure" as const, failure: create(JobFailureSchema, { code: JobFailureCode.CHECKSUM_MISMATCH }) }, "checksum_mismatch"],
    [{ kind: "failure" as const, failure: create(JobFailureSchema, { code: 999 as JobFailureCode }) }, "unspecified"],
    [{ kind: "stopped" as const, reason: "lost" as const }, "lease_lost"],
    [{ kind: "stopped" as const, reason: "stopping" as const }, "stopped"],
  ])("agent job outcome %#", (outcome, expected) => expect(jobOutcomeLabel(outcome)).toBe(expected));
});

describe("CPU utilisation from two readings of the kernel's counters", () => {
  const t = (user: number, sys: number, idle: number, nice = 0, irq = 0): CpuTimes => ({ user, nice, sys, idle, irq });
  it.each<[string, CpuTimes[], CpuTimes[], number | undefined]>([
    ["one CPU, half busy", [t(100, 0, 100)], [t(150, 0, 150)], 50],
    ["idle", [t(100, 50, 100)], [t(100, 50, 300)], 0],
    ["fully busy across user, nice, sys and irq", [t(0, 0, 0)], [t(10, 10, 0, 10, 10)], 100],
    ["two CPUs: one busy, one idle", [t(0, 0, 0), t(0, 0, 0)], [t(100, 0, 0), t(0, 0, 100)], 50],
    ["a quarter", [t(0, 0, 0), t(0, 0, 0)], [t(25, 0, 75), t(25, 0, 75)], 25],
    ["no time elapsed", [t(5, 5, 5)], [t(5, 5, 5)], undefined],
    ["a CPU appeared (hot-plug)", [t(0, 0, 0)], [t(10, 0, 10), t(10, 0, 10)], undefined],
    ["a counter went backwards", [t(100, 0, 100)], [t(50, 0, 200)], undefined],
    ["no earlier reading", [], [t(1, 1, 1)], undefined],
  ])("%s", (_what, previous, current, expected) => {
    const got = cpuUtilization(previous, current);
    if (expected === undefined) expect(got).toBeUndefined();
    else expect(got).toBeCloseTo(expected, 9);
  });

  it("a sampler covers the time since its previous sample", () => {
    const readings = [[t(0, 0, 0)], [t(30, 0, 70)], [t(30, 0, 170)]];
    const sampler = new CpuSampler(() => readings.shift()!);
    expect(sampler.sample()).toBeCloseTo(30, 9);
    expect(sampler.sample()).toBe(0);
  });
});
