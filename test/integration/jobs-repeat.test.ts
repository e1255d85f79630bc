// A completion or failure repeated for the same attempt (the agent's first reply was lost) is
// answered as the first time; a different outcome for a finished attempt is refused. Through the
// real server, as a node, unary and on the Session; and the pure rule as a table.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { Code, ConnectError } from "@connectrpc/connect";
import { create, type MessageInitShape } from "@bufbuild/protobuf";
import { JobState } from "../../gen/proto/modelforge/admin/v1/admin_pb.js";
import type { SessionRequestSchema } from "../../gen/proto/modelforge/agent/v1/agent_pb.js";
import {
  JobFailureCode,
  JobFailureSchema,
  JobResultSchema,
  type JobSpecSchema,
  type JobResultSchema as ResultSchema,
} from "../../gen/proto/modelforge/jobs/v1/jobs_pb.js";
import { judgeRepeat, type ReportedOutcome } from "../../server/jobs/repeats.js";
import { startTestServer, type TestServer } from "../support/server.js";
import { enrollTestNode, eventually, type TestNode } from "../support/node.js";

let ts: TestServer;
beforeAll(async () => {
  ts = await startTestServer();
});
afterAll(async () => {
  await ts?.stop();
});

const spec: MessageInitShape<typeof JobSpecSchema> = { kind: { case: "runtimeHealth", value: { runtimeId: "rt-1" } } };
const healthy = (detail: string): MessageInitShape<typeof ResultSchema> => ({
  result: { case: "runtimeHealth", value: { healthy: true, detail } },
});
const failure = (message: string, retryable = false) => ({ code: JobFailureCode.RUNTIME_ERROR, message, retryable });

async function errorOf(p: Promise<unknown>): Promise<ConnectError> {
  const err = await p.then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(err).toBeInstanceOf(ConnectError);
  return err as ConnectError;
}

/** A polling node (no session) with one job leased to it. */
async function leasedJob(node: TestNode, maxAttempts = 1) {
  const client = await node.client();
  await client.heartbeat({ agentVersion: "test", capabilities: ["runtime.health.v1"] });
  const job = (await ts.admin.createJob({ nodeId: node.nodeId, spec, maxAttempts })).job!;
  const lease = await eventually(async () => (await client.claimJob({})).lease, 5_000, "a lease");
  expect(lease.jobId).toBe(job.id);
  return { client, jobId: job.id, attempt: lease.attempt };
}

const getJob = async (jobId: string) => (await ts.admin.getJob({ jobId })).job!;
const succeededLines = (jobId: string) =>
  ts
    .logs()
    .split("\n")
    .filter((l) => l.includes(jobId) && l.includes('"job succeeded"')).length;

describe("repeated job outcomes, unary", () => {
  it("answers a repeated completion OK, refuses a different result or a failure of that attempt", async () => {
    const node = await enrollTestNode(ts, "completer");
    const { client, jobId, attempt } = await leasedJob(node);
    await client.completeJob({ jobId, attempt, result: healthy("ok") });
    await client.completeJob({ jobId, attempt, result: healthy("ok") }); // the first reply was lost
    const other = await errorOf(client.completeJob({ jobId, attempt, result: healthy("different") }));
    expect(other.code).toBe(Code.Aborted);
    expect(other.rawMessage).toBe(`lease lost: stop work (attempt ${attempt} already succeeded with a different result)`);
    expect((await errorOf(client.failJob({ jobId, attempt, failure: failure("late") }))).code).toBe(Code.Aborted);
    const job = await getJob(jobId);
    expect(job.state).toBe(JobState.SUCCEEDED);
    expect(job.result).toMatchObject({ result: { case: "runtimeHealth", value: { detail: "ok" } } });
    expect(succeededLines(jobId)).toBe(1); // applied once
    // Other rules still hold for a finished job: an attempt never issued, another node.
    expect((await errorOf(client.completeJob({ jobId, attempt: attempt + 1, result: healthy("ok") }))).code).toBe(Code.Aborted);
    const stranger = await (await enrollTestNode(ts, "stranger")).client();
    expect((await errorOf(stranger.completeJob({ jobId, attempt, result: healthy("ok") }))).code).toBe(Code.PermissionDenied);
  });

  it("answers a repeated final failure OK with will_retry false; a different failure or a completion is aborted", async () => {
    const node = await enrollTestNode(ts, "failer");
    const { client, jobId, attempt } = await leasedJob(node);
    expect((await client.failJob({ jobId, attempt, failure: failure("disk full") })).willRetry).toBe(false);
    expect((await client.failJob({ jobId, attempt, failure: failure("disk full") })).willRetry).toBe(false);
    const other = await errorOf(client.failJob({ jobId, attempt, failure: failure("disk on fire") }));
    expect(other.code).toBe(Code.Aborted);
    expect(other.rawMessage).toMatch(/already failed with a different failure/);
    expect((await errorOf(client.failJob({ jobId, attempt, failure: { ...failure("disk full"), retryable: true } }))).code).toBe(
      Code.Aborted,
    );
    expect((await errorOf(client.completeJob({ jobId, attempt, result: healthy("ok") }))).code).toBe(Code.Aborted);
    expect((await getJob(jobId)).failure).toMatchObject({ message: "disk full", retryable: false });
  });

  it("answers a repeated retryable failure OK with will_retry true, even once the next attempt is leased", async () => {
    const node = await enrollTestNode(ts, "retrier");
    const { client, jobId, attempt } = await leasedJob(node, 3);
    expect((await client.failJob({ jobId, attempt, failure: failure("flaky", true) })).willRetry).toBe(true);
    expect((await client.failJob({ jobId, attempt, failure: failure("flaky", true) })).willRetry).toBe(true);
    const next = await eventually(async () => (await client.claimJob({})).lease, 5_000, "attempt 2");
    expect(next.attempt).toBe(attempt + 1);
    expect((await client.failJob({ jobId, attempt, failure: failure("flaky", true) })).willRetry).toBe(true);
    expect((await errorOf(client.completeJob({ jobId, attempt, result: healthy("ok") }))).code).toBe(Code.Aborted);
    // The live attempt is untouched by the repeats.
    const job = await getJob(jobId);
    expect(job.state).toBe(JobState.LEASED);
    expect(job.attempt).toBe(attempt + 1);
  });
});

describe("repeated job outcomes, on the Session", () => {
  it("answers a repeated completion with a jobComplete reply, a different one with an aborted reply", async () => {
    const node = await enrollTestNode(ts, "session-completer");
    const { client, jobId, attempt } = await leasedJob(node);
    type Req = MessageInitShape<typeof SessionRequestSchema>;
    const complete = (messageId: bigint, detail: string): Req => ({
      messageId,
      message: { case: "jobComplete", value: { jobId, attempt, result: healthy(detail) } },
    });
    let done!: () => void;
    const finished = new Promise<void>((resolve) => (done = resolve));
    const outbound = (async function* (): AsyncGenerator<Req> {
      // It says it runs the job (else the lease would be returned to the queue as abandoned).
      yield { messageId: 1n, message: { case: "hello", value: { protocolVersion: 1, agentVersion: "test", runningJobIds: [jobId] } } };
      yield complete(2n, "ok");
      yield complete(3n, "ok");
      yield complete(4n, "changed");
      await finished;
    })();
    const replies: string[] = [];
    for await (const res of client.session(outbound)) {
      if (res.message.case !== "reply") continue;
      const { messageId, result } = res.message.value;
      replies.push(`${messageId}:${result.case === "error" ? result.value.code : result.case}`);
      if (replies.length === 3) break;
    }
    done();
    expect(replies).toEqual(["2:jobComplete", "3:jobComplete", "4:aborted"]);
    expect(succeededLines(jobId)).toBe(1);
  });
});

describe("judgeRepeat", () => {
  const result = (detail: string): ReportedOutcome => ({ kind: "result", result: create(JobResultSchema, healthy(detail)) });
  const failed = (message: string, retryable = false): ReportedOutcome => ({
    kind: "failure",
    failure: create(JobFailureSchema, failure(message, retryable)),
  });
  const cases: [string, Parameters<typeof judgeRepeat>, ReturnType<typeof judgeRepeat>][] = [
    ["attempt still running", [{ state: "leased", attempt: 1 }, 1, { outcome: null, recorded: undefined }, result("ok")], { kind: "none" }],
    ["attempt row unknown", [{ state: "leased", attempt: 1 }, 1, null, result("ok")], { kind: "none" }],
    [
      "attempt expired (the server ended it)",
      [{ state: "leased", attempt: 2 }, 1, { outcome: "expired", recorded: undefined }, result("ok")],
      { kind: "none" },
    ],
    [
      "attempt reclaimed",
      [{ state: "failed", attempt: 1 }, 1, { outcome: "reclaimed", recorded: failed("x") }, failed("x")],
      { kind: "none" },
    ],
    [
      "ended before outcomes were recorded",
      [{ state: "failed", attempt: 1 }, 1, { outcome: "failed", recorded: undefined }, failed("x")],
      { kind: "none" },
    ],
    [
      "same result",
      [{ state: "succeeded", attempt: 1 }, 1, { outcome: "succeeded", recorded: result("ok") }, result("ok")],
      { kind: "same", willRetry: false },
    ],
    [
      "other result",
      [{ state: "succeeded", attempt: 1 }, 1, { outcome: "succeeded", recorded: result("ok") }, result("no")],
      { kind: "different", reason: "lease lost: stop work (attempt 1 already succeeded with a different result)" },
    ],
    [
      "failure after success",
      [{ state: "succeeded", attempt: 1 }, 1, { outcome: "succeeded", recorded: result("ok") }, failed("x")],
      { kind: "different", reason: "lease lost: stop work (attempt 1 already succeeded with a different result)" },
    ],
    [
      "no payload",
      [{ state: "succeeded", attempt: 1 }, 1, { outcome: "succeeded", recorded: result("ok") }, undefined],
      { kind: "different", reason: "lease lost: stop work (attempt 1 already succeeded with a different result)" },
    ],
    [
      "same final failure",
      [{ state: "failed", attempt: 2 }, 2, { outcome: "failed", recorded: failed("x") }, failed("x")],
      { kind: "same", willRetry: false },
    ],
    [
      "same retried failure, job pending",
      [{ state: "pending", attempt: 1 }, 1, { outcome: "failed", recorded: failed("x", true) }, failed("x", true)],
      { kind: "same", willRetry: true },
    ],
    [
      "same retried failure, next attempt finished",
      [{ state: "succeeded", attempt: 2 }, 1, { outcome: "failed", recorded: failed("x", true) }, failed("x", true)],
      { kind: "same", willRetry: true },
    ],
    [
      "other message",
      [{ state: "failed", attempt: 1 }, 1, { outcome: "failed", recorded: failed("x") }, failed("y")],
      { kind: "different", reason: "lease lost: stop work (attempt 1 already failed with a different failure)" },
    ],
    [
      "other retryable flag",
      [{ state: "failed", attempt: 1 }, 1, { outcome: "failed", recorded: failed("x") }, failed("x", true)],
      { kind: "different", reason: "lease lost: stop work (attempt 1 already failed with a different failure)" },
    ],
    [
      "completion after failure",
      [{ state: "failed", attempt: 1 }, 1, { outcome: "failed", recorded: failed("x") }, result("ok")],
      { kind: "different", reason: "lease lost: stop work (attempt 1 already failed with a different failure)" },
    ],
    [
      "same cancellation",
      [{ state: "cancelled", attempt: 1 }, 1, { outcome: "cancelled", recorded: failed("c") }, failed("c")],
      { kind: "same", willRetry: false },
    ],
  ];
  it.each(cases)("%s", (_name, args, want) => {
    expect(judgeRepeat(...args)).toEqual(want);
  });
});
