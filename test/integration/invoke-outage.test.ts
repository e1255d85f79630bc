// Inference through a database outage (issue 34): a control plane on a private PostgreSQL this
// file starts, stops for 15 s and starts again; a real agent process serving the tiny GGUF; unary
// and streaming invokes throughout. None is refused: the key, the route and the node's session are
// answered from what the server holds. Only a key never read before is refused ("database
// unavailable: retry"). The invocation counts, whose writes fail during the outage, add up to the
// invokes served once the database is back; so does each key's usage (issue 36): the ledger keeps
// what its failed flushes held, and GetUsage's requests and tokens equal what clients were answered.
// A key with limits keeps being served through the outage, admitted from this replica's share.
//
// It runs in CI's PostgreSQL pass only: its database is its own whatever MODELFORGE_TEST_DB says,
// so the PGlite pass would repeat the same minute on the same two cores.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import pg from "pg";
import { Code, ConnectError } from "@connectrpc/connect";
import { systemClock } from "../../common/clock.js";
import { writeTinyLlamaGguf } from "../../scripts/gguf.js";
import { startTestServer, type TestServer } from "../support/server.js";
import { eventually } from "../support/node.js";
import type { AgentProcess } from "../support/process.js";
import { privatePostgresProblem, startPrivatePostgres, type PrivatePostgres } from "../support/private-postgres.js";
import { waitFor } from "../support/wait.js";
import { serveTiny, servingNode } from "../support/serving.js";
import { answered, completion, invokeLoop, recorded, serviceClient, type InvokeLoop, type Totals } from "../support/usage-load.js";

const outageMs = 15_000;
const commit = "d".repeat(40);
const problem = process.env.MODELFORGE_TEST_DB !== "postgres" ? "runs in the MODELFORGE_TEST_DB=postgres pass" : privatePostgresProblem();

let postgres: PrivatePostgres;
let databaseUrl: string;
let ts: TestServer;
let agent: AgentProcess;
let root: string;
let secret: string;
let keyId: string;
let limitedSecret: string;
let limitedKeyId: string;
let unreadSecret: string;
let deploymentId: string;

beforeAll(async () => {
  if (problem !== undefined) return;
  postgres = await startPrivatePostgres();
  const admin = new pg.Client({ connectionString: postgres.url });
  await admin.connect();
  await admin.query(`CREATE DATABASE "invoke_drill"`);
  await admin.end();
  databaseUrl = postgres.url.replace(/\/postgres$/, "/invoke_drill");
  root = mkdtempSync(join(tmpdir(), "mf-invoke-outage-"));
  const path = join(root, "tiny.gguf");
  const model = await writeTinyLlamaGguf(path, { contextLength: 2048 });
  ts = await startTestServer(
    {
      DATABASE_URL: databaseUrl,
      MODELFORGE_HEARTBEAT_INTERVAL: "1s",
      MODELFORGE_APPROVED_ROOTS: root,
      MODELFORGE_LOG_LEVEL: "info",
      MODELFORGE_USAGE_FLUSH: "1s",
    },
    { invokeCountsFlushMs: 1_000 },
  );
  const serving = await servingNode(ts, root, "serving", 2048);
  agent = serving.agent;
  const node = serving.node;
  deploymentId = await serveTiny(ts.admin, { nodeId: node.nodeId, commit, root, file: path, sha256: model.sha256 });
  const key = await ts.admin.createServiceKey({ name: "svc", deployments: ["tiny"] });
  secret = key.secret;
  keyId = key.key!.id;
  // Limits the drill's load never reaches, even on one replica's share: it must never be refused.
  const limits = { requestsPerMinute: 100_000, tokensPerMinute: 1_000_000, dailyTokens: 100_000_000n };
  const limited = await ts.admin.createServiceKey({ name: "limited", deployments: ["tiny"], limits });
  limitedSecret = limited.secret;
  limitedKeyId = limited.key!.id;
  unreadSecret = (await ts.admin.createServiceKey({ name: "never-used", deployments: ["tiny"] })).secret;
}, 180_000);

afterAll(async () => {
  await agent?.stop();
  await ts?.stop();
  await postgres?.destroy();
  if (root) rmSync(root, { recursive: true, force: true });
}, 60_000);

/** The "ok" count of every deployment.invocations event of the deployment, summed, and any other outcome. */
async function countedInDatabase(): Promise<{ ok: number; other: string[] }> {
  const sql = new pg.Client({ connectionString: databaseUrl });
  await sql.connect();
  try {
    const { rows } = await sql.query<{ details: Record<string, string> }>(
      `SELECT details FROM "AuditEvent" WHERE action = 'deployment.invocations' AND "targetId" = $1`,
      [deploymentId],
    );
    const ok = rows.reduce((n, r) => n + Number(r.details.ok ?? 0), 0);
    return { ok, other: rows.flatMap((r) => Object.keys(r.details).filter((k) => k !== "ok")) };
  } finally {
    await sql.end();
  }
}

/** Waits until GetUsage says the key used what its loops were answered; no request of it failed. */
async function usageMatches(key: string, loops: readonly InvokeLoop[]): Promise<void> {
  const got = answered(loops.flatMap((l) => l.answers));
  let last: Totals | undefined;
  await waitFor(
    async () => {
      last = await recorded(ts.admin, key);
      return last.requests === got.requests && last.completionTokens === got.completionTokens && last.promptTokens === got.promptTokens;
    },
    { timeout: 15_000, what: () => `usage ${JSON.stringify(got)} recorded (${JSON.stringify(last)} so far)` },
  );
  expect(last?.failedRequests).toBe(0);
}

describe.skipIf(problem !== undefined)(`invokes through a database outage${problem ? ` (skipped: ${problem})` : ""}`, () => {
  it(`serves every invoke of a known key through a ${outageMs / 1000} s PostgreSQL outage, and counts them all`, async () => {
    const client = serviceClient(ts.url, ts.caPem, () => secret);
    const stop = new AbortController();
    const loads = [invokeLoop(client, false, stop.signal), invokeLoop(client, false, stop.signal), invokeLoop(client, true, stop.signal)];
    const limitedLoad = invokeLoop(
      serviceClient(ts.url, ts.caPem, () => limitedSecret),
      false,
      stop.signal,
    );
    const all = [...loads, limitedLoad];
    const servedSince = (t: number, which = all) => which.reduce((n, l) => n + l.answers.filter((a) => a.at > t).length, 0);
    try {
      // Warm: the keys, the route and the session are known before the database goes.
      await eventually(() => all.every((l) => l.answers.length > 0), 30_000, "each loop served once");

      const stoppedAt = Date.now();
      await postgres.stop();
      await ts.logFeed.waitForMatch(/"msg":"database lost/, { timeout: 10_000 });
      // Served while the database is known lost, unary, streamed and limited; long past every cache's lifetime.
      const lostAt = Date.now();
      await waitFor(
        () =>
          servedSince(lostAt, loads.slice(0, 2)) >= 3 &&
          servedSince(lostAt, loads.slice(2)) >= 2 &&
          servedSince(lostAt, [limitedLoad]) >= 2,
        { timeout: outageMs, what: "unary, streamed and limited invokes served during the outage" },
      );
      // A key this server never read needs the database: refused, and said so.
      const refused = await serviceClient(ts.url, ts.caPem, () => unreadSecret)
        .invoke({ deploymentId: "tiny", payload: completion(2) })
        .then(
          () => undefined,
          (err: unknown) => ConnectError.from(err),
        );
      expect(refused?.code).toBe(Code.Unavailable);
      expect(refused?.rawMessage).toBe("database unavailable: retry");
      // The drill's premise is an outage of this length, not an event to wait for.
      await systemClock.sleep(Math.max(0, outageMs - (Date.now() - stoppedAt)));
      expect(servedSince(stoppedAt)).toBeGreaterThan(10);
    } finally {
      await postgres.start();
    }
    await ts.logFeed.waitForMatch(/"msg":"database back"/, { timeout: 15_000 });
    const backAt = Date.now();
    await eventually(() => servedSince(backAt) >= 3, 15_000, "invokes served after the outage");
    stop.abort();
    await Promise.all(all.map((l) => l.done));

    expect(all.flatMap((l) => l.failures)).toEqual([]);
    const served = servedSince(0);
    // The flushes that failed during the outage kept their counts: the next ones wrote them.
    let last = { ok: 0, other: [] as string[] };
    const counted = await waitFor(
      async () => {
        last = await countedInDatabase();
        return last.ok === served ? last : undefined;
      },
      { timeout: 15_000, what: () => `${served} invokes counted in the database (${last.ok} so far)` },
    );
    expect(counted.other).toEqual([]);
    // And so did the usage ledger's: each key's recorded usage is what its clients were answered.
    await usageMatches(keyId, loads);
    await usageMatches(limitedKeyId, [limitedLoad]);
    // The agent kept its one session throughout.
    expect(agent.output().match(/"msg":"session established"/g)).toHaveLength(1);
  }, 120_000);
});
