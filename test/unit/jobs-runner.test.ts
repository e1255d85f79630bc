// The agent's JobRunner against a scripted session link: renewal cadence, de-duplication of a
// re-sent lease, stopping on a lost lease, unknown kinds, and receipts that survive a restart.
import { afterAll, describe, expect, it } from "vitest";
import { mkdtempSync, rmSync, writeFileSync, statSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { pino } from "pino";
import { create } from "@bufbuild/protobuf";
import { timestampFromMs } from "@bufbuild/protobuf/wkt";
import { JobCancelSchema, type Reply } from "../../gen/proto/modelforge/agent/v1/agent_pb.js";
import { JobFailureCode, JobLeaseSchema, JobSpecSchema, type JobLease } from "../../gen/proto/modelforge/jobs/v1/jobs_pb.js";
import type { SessionLink } from "../../agent/session/run.js";
import { CapabilityRegistry, JobCancelled, JobRunner, LeaseLost, ReceiptStore, type JobHandler } from "../../agent/jobs/index.js";
import { eventually } from "../support/node.js";
import { ManualClock, systemClock, type Clock } from "../../common/clock.js";
import type { LinkMessage } from "../support/agent.js";

const dir = mkdtempSync(join(tmpdir(), "mf-runner-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));
const log = pino({ level: "silent" });

type Answer = (m: LinkMessage) => Reply["result"] | Promise<Reply["result"]>;

/** A session link that records what the runner sends and answers as scripted. */
function fakeLink(answer: Answer = okAnswer, clock: Clock = systemClock) {
  const sent: { m: LinkMessage; at: number }[] = [];
  const link: SessionLink = {
    send: async (m) => {
      sent.push({ m, at: clock.now() });
      return answer(m);
    },
  };
  return { link, sent, of: (kind: LinkMessage["case"]) => sent.filter((s) => s.m.case === kind) };
}

function okAnswer(m: LinkMessage): Reply["result"] {
  switch (m.case) {
    case "jobProgress":
      return { case: "jobProgress", value: { $typeName: "modelforge.agent.v1.ReportJobProgressResponse", cancelRequested: false } };
    case "jobComplete":
      return { case: "jobComplete", value: { $typeName: "modelforge.agent.v1.CompleteJobResponse" } };
    case "jobFail":
      return { case: "jobFail", value: { $typeName: "modelforge.agent.v1.FailJobResponse", willRetry: false } };
    default:
      throw new Error(`unexpected ${String(m.case)}`);
  }
}
const refuse = (code: string, message: string): Reply["result"] => ({
  case: "error",
  value: { $typeName: "modelforge.agent.v1.ReplyError", code, message },
});

let n = 0;
function lease(
  spec: JobLease["spec"] | undefined,
  attempt = 1,
  leaseMs = 600,
  jobId = `00000000-0000-4000-8000-${String(++n).padStart(12, "0")}`,
  now = Date.now(),
): JobLease {
  return create(JobLeaseSchema, { jobId, attempt, expiresAt: timestampFromMs(now + leaseMs), ...(spec ? { spec } : {}) });
}
const healthSpec = {
  $typeName: "modelforge.jobs.v1.JobSpec",
  kind: { case: "runtimeHealth", value: { $typeName: "modelforge.jobs.v1.RuntimeHealth", runtimeId: "rt" } },
} as const;
const drainSpec = {
  $typeName: "modelforge.jobs.v1.JobSpec",
  kind: { case: "deploymentDrain", value: { $typeName: "modelforge.jobs.v1.DeploymentDrain", deploymentId: "d", revision: 0n } },
} as const;

function until(signal: AbortSignal): Promise<never> {
  return new Promise((_resolve, reject) => signal.addEventListener("abort", () => reject(signal.reason as Error)));
}

function runnerWith(handlers: Record<string, JobHandler>, { clock }: { clock?: Clock } = {}) {
  const registry = new CapabilityRegistry();
  for (const [k, h] of Object.entries(handlers)) registry.register(k, h);
  return new JobRunner({
    registry,
    log,
    retryDelayMs: 20,
    unavailableRetryMs: 20,
    ...(clock ? { clock } : {}),
  });
}

describe("JobRunner", () => {
  it("advertises exactly its registered capabilities and refuses names outside the contract", () => {
    const r = runnerWith({ "deployment.drain.v1": async () => ({}), "runtime.health.v1": async () => ({}) });
    expect(r.capabilities()).toEqual(["runtime.health.v1", "deployment.drain.v1"]); // contract order
    expect(() => new CapabilityRegistry().register("shell.exec.v1", async () => ({}))).toThrow(/not a capability of the contract/);
  });

  it("renews at least every third of the lease while the handler runs, and runs a re-sent lease once", async () => {
    let calls = 0;
    const release = new AbortController();
    const clock = new ManualClock();
    const r = runnerWith(
      {
        "runtime.health.v1": async () => {
          calls++;
          await until(release.signal).catch(() => undefined);
          return { result: { case: "runtimeHealth", value: { healthy: true } } };
        },
      },
      { clock },
    );
    const first = fakeLink(okAnswer, clock);
    const l = lease(healthSpec, 1, 600, undefined, clock.now());
    r.onLease(l, first.link);
    // Each tick is one round of the renewal loop: nothing before a third of the lease, then one
    // renewal every third.
    await clock.tick(199);
    expect(first.of("jobProgress")).toHaveLength(0);
    await clock.tick(1);
    for (let i = 0; i < 3; i++) await clock.tick(200);
    const renewals = first.of("jobProgress");
    expect(renewals).toHaveLength(4);
    for (let i = 1; i < renewals.length; i++) expect(renewals[i]!.at - renewals[i - 1]!.at).toBe(200);

    // The same lease again (after a reconnect): not run again, reports move to the new link.
    const second = fakeLink();
    r.onLease(l, second.link);
    expect(r.runningJobIds()).toEqual([l.jobId]);
    release.abort();
    await r.idle();
    expect(calls).toBe(1);
    expect(second.of("jobComplete")).toHaveLength(1);
    expect(first.of("jobComplete")).toHaveLength(0);
  });

  it("fails a result that cannot be encoded instead of sending it (it would break the Session, again and again)", async () => {
    const probeSpec = {
      $typeName: "modelforge.jobs.v1.JobSpec",
      kind: {
        case: "runtimeProbe",
        value: {
          $typeName: "modelforge.jobs.v1.RuntimeProbe",
          runtimeProfile: "p",
          runtimeEnvironment: "e",
          artifacts: [],
          probeInputId: "",
        },
      },
    } as const;
    const r = runnerWith({
      // A Duration with fractional nanos: protobuf-es refuses to encode it.
      "runtime.probe.v1": async () => ({
        result: { case: "runtimeProbe", value: { healthy: true, loadDuration: { seconds: 1n, nanos: 0.5 } } },
      }),
    });
    const link = fakeLink();
    r.onLease(lease(probeSpec as unknown as JobLease["spec"], 1, 600), link.link);
    await r.idle();
    expect(link.of("jobComplete")).toHaveLength(0);
    const failed = link.of("jobFail");
    expect(failed).toHaveLength(1);
    const failure = (failed[0]!.m.value as { failure: { code: number; message: string; retryable: boolean } }).failure;
    expect(failure.code).toBe(JobFailureCode.INTERNAL);
    expect(failure.retryable).toBe(false);
    expect(failure.message).toMatch(/cannot be encoded/);
  });

  it("stops the work and reports nothing when the server says the lease is lost", async () => {
    const reasons: unknown[] = [];
    const r = runnerWith({
      "runtime.health.v1": async (_s, ctx) => {
        await until(ctx.signal).catch((e: unknown) => reasons.push(e));
        throw ctx.signal.reason as Error;
      },
    });
    const link = fakeLink((m) =>
      m.case === "jobProgress" ? refuse("aborted", "lease lost: stop work (attempt 1 is stale; current attempt is 2)") : okAnswer(m),
    );
    r.onLease(lease(healthSpec, 1, 300), link.link);
    await r.idle();
    expect(reasons[0]).toBeInstanceOf(LeaseLost);
    expect(link.of("jobComplete")).toHaveLength(0);
    expect(link.of("jobFail")).toHaveLength(0);
  });

  it("keeps working while the server answers unavailable, and re-sends its completion until accepted, on the newest session", async () => {
    const release = new AbortController();
    let aborted = false;
    const r = runnerWith({
      "runtime.health.v1": async (_s, ctx) => {
        ctx.signal.addEventListener("abort", () => (aborted = true));
        await until(release.signal).catch(() => undefined);
        return { result: { case: "runtimeHealth", value: { healthy: true } } };
      },
    });
    // The database is away: every report is refused for now on the first session (progress with
    // `unknown`, as servers before the central mapping answered: not a verdict on the lease either).
    const outage = fakeLink((m) => refuse(m.case === "jobProgress" ? "unknown" : "unavailable", "database unavailable: retry"));
    const l = lease(healthSpec, 1, 2_000);
    r.onLease(l, outage.link);
    await eventually(() => outage.of("jobProgress").length >= 2, 5_000, "renewals refused");
    release.abort();
    await eventually(() => outage.of("jobComplete").length >= 3, 5_000, "the completion sent again");
    // The session is replaced (a reconnect re-sends the lease) and the database is back.
    const next = fakeLink();
    r.onLease(l, next.link);
    await r.idle();
    expect(aborted).toBe(false);
    expect(next.of("jobComplete")).toHaveLength(1);
  });

  it("stops the work once the lease's own expiry passes while the server cannot renew it", async () => {
    const reasons: unknown[] = [];
    const clock = new ManualClock();
    const r = runnerWith(
      {
        "runtime.health.v1": async (_s, ctx) => {
          await until(ctx.signal).catch((e: unknown) => reasons.push(e));
          throw ctx.signal.reason as Error;
        },
      },
      { clock },
    );
    const link = fakeLink(() => refuse("unavailable", "database unavailable: retry"), clock);
    r.onLease(lease(healthSpec, 1, 300, undefined, clock.now()), link.link);
    // Asked again every 20 ms from a third of the lease on, refused each time: the work goes on
    // while the lease lasts ...
    for (let t = 0; t < 280; t += 20) await clock.tick(20);
    expect(link.of("jobProgress").length).toBeGreaterThanOrEqual(5);
    expect(reasons).toHaveLength(0);
    // ... and stops when it has run out.
    await clock.tick(20);
    await r.idle();
    expect(reasons[0]).toBeInstanceOf(LeaseLost);
    expect(link.of("jobComplete")).toHaveLength(0);
    expect(link.of("jobFail")).toHaveLength(0);
  });

  it("reports a cancelled job as CANCELLED, not retryable", async () => {
    const reasons: unknown[] = [];
    const r = runnerWith({
      "runtime.health.v1": async (_s, ctx) => {
        await until(ctx.signal).catch((e: unknown) => reasons.push(e));
        throw ctx.signal.reason as Error;
      },
    });
    const link = fakeLink();
    const l = lease(healthSpec);
    r.onLease(l, link.link);
    r.onCancel(create(JobCancelSchema, { jobId: l.jobId, attempt: 1, reason: "operator said so" }));
    await r.idle();
    expect(reasons[0]).toBeInstanceOf(JobCancelled);
    const fail = link.of("jobFail")[0]!.m;
    expect(fail.case === "jobFail" && fail.value.failure).toMatchObject({
      code: JobFailureCode.CANCELLED,
      retryable: false,
      message: "cancelled: operator said so",
    });
  });

  it("fails a lease whose paths break the artifact path grammar with PATH_REJECTED, without running it", async () => {
    let ran = 0;
    const r = runnerWith({
      "artifact.acquire.v1": async () => {
        ran++;
        return { result: { case: "artifactAcquire", value: {} } };
      },
    });
    const link = fakeLink();
    const acquire = (path: string) =>
      create(JobSpecSchema, {
        kind: {
          case: "artifactAcquire",
          value: {
            repository: "org/m",
            commit: "a".repeat(40),
            targetRoot: "/srv/models",
            files: [{ path, sizeBytes: 1n, sha256: "b".repeat(64) }],
          },
        },
      });
    for (const path of [
      "%2e%2e/%2e%2e/etc/passwd",
      "\u2024\u2024/etc/passwd",
      "\uff0e\uff0e/x",
      "~/.ssh/authorized_keys",
      ".git/hooks/post-checkout",
      "a\nb",
    ]) {
      r.onLease(lease(acquire(path)), link.link);
    }
    await r.idle();
    expect(ran).toBe(0);
    const failures = link.of("jobFail").map((s) => (s.m.case === "jobFail" ? s.m.value.failure : undefined));
    expect(failures).toHaveLength(6);
    for (const f of failures) {
      expect(f).toMatchObject({ code: JobFailureCode.PATH_REJECTED, retryable: false });
      expect(f!.message).toMatch(/^spec\.artifact_acquire\.files\[0\]\.path: /);
    }
    // A path of the grammar runs.
    r.onLease(lease(acquire("weights/model-00001-of-00002.safetensors")), link.link);
    await r.idle();
    expect(ran).toBe(1);
  });

  it("fails an unknown or empty kind at once with UNSUPPORTED_CAPABILITY", async () => {
    const r = runnerWith({ "runtime.health.v1": async () => ({ result: { case: "runtimeHealth", value: {} } }) });
    const link = fakeLink();
    r.onLease(lease(drainSpec), link.link);
    r.onLease(lease(undefined), link.link);
    await r.idle();
    const failures = link.of("jobFail").map((s) => (s.m.case === "jobFail" ? s.m.value.failure : undefined));
    expect(failures).toEqual([
      expect.objectContaining({
        code: JobFailureCode.UNSUPPORTED_CAPABILITY,
        retryable: false,
        message: 'this agent does not implement capability "deployment.drain.v1"; it implements: runtime.health.v1',
      }),
      expect.objectContaining({ code: JobFailureCode.UNSUPPORTED_CAPABILITY, retryable: false }),
    ]);
    expect(link.of("jobProgress")).toHaveLength(0);
  });

  it("fails a handler's wrong result case and turns unexpected errors into retryable INTERNAL failures", async () => {
    const r = runnerWith({
      "runtime.health.v1": async () => ({ result: { case: "deploymentHealth", value: {} } }),
      "deployment.health.v1": async () => {
        throw new Error("disk on fire");
      },
    });
    const link = fakeLink();
    r.onLease(lease(healthSpec), link.link);
    r.onLease(
      lease({
        $typeName: "modelforge.jobs.v1.JobSpec",
        kind: { case: "deploymentHealth", value: { $typeName: "modelforge.jobs.v1.DeploymentHealth", deploymentId: "d", revision: 0n } },
      }),
      link.link,
    );
    await r.idle();
    const failures = link.of("jobFail").map((s) => (s.m.case === "jobFail" ? s.m.value.failure : undefined));
    expect(failures).toContainEqual(
      expect.objectContaining({
        code: JobFailureCode.INTERNAL,
        retryable: false,
        message: "the handler of runtime.health.v1 returned a deployment.health.v1 result",
      }),
    );
    expect(failures).toContainEqual(
      expect.objectContaining({ code: JobFailureCode.INTERNAL, retryable: true, message: "unexpected error: disk on fire" }),
    );
  });

  it("keeps receipts of finished destructive jobs across restarts and replays them without running the job", async () => {
    const path = join(dir, "receipts.json");
    let runs = 0;
    const drain: JobHandler = async () => {
      runs++;
      return { result: { case: "deploymentDrain", value: { completedInFlight: 3 } } };
    };
    // The first agent does the work, but the network loses the report.
    const lost = fakeLink((m) => {
      if (m.case === "jobComplete") throw new Error("network down");
      return okAnswer(m);
    });
    const stop = new AbortController();
    const first = new JobRunner({
      registry: new CapabilityRegistry().register("deployment.drain.v1", drain),
      receipts: await ReceiptStore.open(path),
      log,
      signal: stop.signal,
      retryDelayMs: 20,
    });
    const l = lease(drainSpec);
    first.onLease(l, lost.link);
    await eventually(() => lost.of("jobComplete").length >= 2, 2_000, "report retried");
    stop.abort(); // the agent process ends
    await first.idle();
    expect(statSync(path).mode & 0o777).toBe(0o600);

    // A new agent process gets the lease again (a higher attempt) and only re-sends the outcome.
    const second = new JobRunner({
      registry: new CapabilityRegistry().register("deployment.drain.v1", drain),
      receipts: await ReceiptStore.open(path),
      log,
    });
    const link = fakeLink();
    second.onLease(lease(drainSpec, 2, 600, l.jobId), link.link);
    await second.idle();
    expect(runs).toBe(1);
    const complete = link.of("jobComplete")[0]!.m;
    expect(complete.case === "jobComplete" && complete.value).toMatchObject({
      jobId: l.jobId,
      attempt: 2,
      result: { result: { case: "deploymentDrain", value: { completedInFlight: 3 } } },
    });

    // A damaged receipts file is an error, never an empty store.
    const damaged = join(dir, "damaged.json");
    writeFileSync(damaged, "{not json");
    await expect(ReceiptStore.open(damaged)).rejects.toThrow(/damaged/);
  });
});
