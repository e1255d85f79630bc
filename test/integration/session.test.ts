// The agent session end to end, with a real agent process and a fake nvidia-smi on its PATH:
// liveness from server time, strict ordering of samples, bad clocks that cannot poison state, and
// GPU reconciliation that tells a missing GPU from a failed collection.
import { once } from "node:events";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { cpSync, mkdtempSync, renameSync, rmSync, writeFileSync, readFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import http2 from "node:http2";
import { Code, ConnectError } from "@connectrpc/connect";
import { create, toBinary, type MessageInitShape } from "@bufbuild/protobuf";
import { timestampFromMs, timestampMs } from "@bufbuild/protobuf/wkt";
import { GpuState } from "../../gen/proto/modelforge/admin/v1/admin_pb.js";
import { SessionRequestSchema } from "../../gen/proto/modelforge/agent/v1/agent_pb.js";
import { frame } from "../../common/grpc-frames.js";
import { Liveness } from "../../gen/proto/modelforge/common/v1/common_pb.js";
import { startTestServer, type TestServer } from "../support/server.js";
import { enrollTestNode, type TestNode } from "../support/node.js";
import { waitFor } from "../support/wait.js";
import { ManualClock } from "../../common/clock.js";
import { spawnAgent, type AgentProcess } from "../support/process.js";
import { postJson } from "../support/http.js";
import { agentVersion } from "../../agent/version.js";

/** Holds a hand-written agent's side of a Session open until the test lets go: the server ends it first. */
function holdOpen() {
  let release!: () => void;
  const held = new Promise<void>((resolve) => (release = resolve));
  return { held, release };
}

const fixture = fileURLToPath(new URL("../fixtures/nvidia-smi/three-gpus", import.meta.url));
let ts: TestServer;
let node: TestNode;
let gpuDir: string;
let agent: AgentProcess | undefined;

const getNode = () => ts.admin.getNode({ nodeId: node.nodeId });
const cursor = async (stream: string) => (await getNode()).cursors.find((c) => c.stream === stream);
const start = (env: Record<string, string> = {}) => {
  agent = spawnAgent(node.statePath, { FAKE_NVIDIA_SMI_DIR: gpuDir, ...env });
  return agent;
};
const actions = async () => (await ts.admin.listAuditEvents({ pageSize: 1000 })).events;
/** The reconciler's log line for this node's move from `from` to `to` (its audit event is committed by then). */
const moved = (from: string, to: string) =>
  ts.logFeed.waitForMatch(new RegExp(`"nodeId":"${node.nodeId}","from":"${from}","to":"${to}"[^\\n]*"msg":"node liveness changed"`));

/**
 * The server's time: liveness moves when the test ticks it. A tick runs one round of each loop,
 * and a move needs two (the heartbeat flush, then the reconciler that reads it).
 */
const clock = new ManualClock();
const reconcile = async (ms = 100) => {
  await clock.tick(ms);
  await clock.tick(100);
};

beforeAll(async () => {
  ts = await startTestServer(
    {
      MODELFORGE_HEARTBEAT_INTERVAL: "200ms",
      MODELFORGE_TELEMETRY_INTERVAL: "300ms",
      MODELFORGE_STALE_AFTER: "1s",
      MODELFORGE_OFFLINE_AFTER: "2s",
    },
    { clock },
  );
  node = await enrollTestNode(ts, "gpu-node");
  gpuDir = mkdtempSync(join(tmpdir(), "mf-gpus-"));
  cpSync(fixture, gpuDir, { recursive: true });
});
afterAll(async () => {
  await agent?.stop();
  await ts?.stop();
  rmSync(gpuDir, { recursive: true, force: true });
});

// In order: the first test starts the agent the others go on with (killed, restarted, its clock moved).
describe.sequential("a real agent process", () => {
  it("comes online with its inventory, GPUs and telemetry", async () => {
    start();
    const got = await waitFor(
      async () => {
        const n = await getNode();
        return n.node?.liveness === Liveness.ONLINE && n.gpus.length === 3 && n.telemetry !== undefined ? n : undefined;
      },
      { what: "node online with 3 GPUs" },
    );
    expect(got.node?.connected).toBe(true);
    expect(got.node?.gpuCount).toBe(3);
    expect(got.node?.host?.hostname).not.toBe("");
    // No artifact source and no runtimes: this agent offers no job capability at all.
    expect(got.node?.capabilities).toEqual([]);
    expect(got.gpus.map((g) => g.info?.uuid)).toContain("GPU-c3d4e5f6-a7b8-49c0-d1e2-f3a4b5c6d7e8");
    expect(got.gpus.every((g) => g.state === GpuState.PRESENT)).toBe(true);
    expect(got.telemetry?.telemetry?.gpus).toHaveLength(3);
    expect((await cursor("inventory"))?.rejectionReason).toBe("");
    const list = await ts.admin.listNodes({ liveness: [Liveness.ONLINE] });
    expect(list.nodes.map((n) => n.id)).toContain(node.nodeId);
    expect((await ts.admin.listNodes({ liveness: [Liveness.OFFLINE] })).nodes).toHaveLength(0);
    await reconcile();
    await moved("pending", "online");
  });

  /**
   * Replaces one of the fake nvidia-smi's files whole. Written in place, the agent's collection
   * could read it truncated: an empty inventory with exit 0 is a complete one with no GPUs, and
   * marked all three missing (seen under a loaded CI run).
   */
  const put = (name: string, text: string) => {
    const tmp = join(gpuDir, `.${name}.tmp`);
    writeFileSync(tmp, text);
    renameSync(tmp, join(gpuDir, name));
  };

  it("marks a GPU missing when a complete inventory omits it", async () => {
    const lines = readFileSync(join(fixture, "inventory.csv"), "utf8").trim().split("\n");
    put("inventory.csv", `${lines.slice(0, 2).join("\n")}\n`);
    const got = await waitFor(
      async () => {
        const n = await getNode();
        return n.gpus.some((g) => g.state === GpuState.MISSING) ? n : undefined;
      },
      { what: "a missing GPU" },
    );
    const missing = got.gpus.filter((g) => g.state === GpuState.MISSING);
    expect(missing.map((g) => g.info?.uuid)).toEqual(["GPU-c3d4e5f6-a7b8-49c0-d1e2-f3a4b5c6d7e8"]);
    expect(got.node?.gpuCount).toBe(2);
    expect((await actions()).some((e) => e.action === "gpu.missing" && e.targetId === missing[0]!.info!.uuid)).toBe(true);
  });

  it("keeps last-good GPU state when the collection fails, and a returning GPU is present again", async () => {
    const before = (await cursor("inventory"))!.appliedSequence;
    // The exit status first: from then on every collection fails, whatever else it reads.
    put("exit_code", "9\n");
    put("stderr", "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver\n");
    put("inventory.csv", "");
    // The failed collection is a change, so the agent sends it; it applies but marks nothing missing.
    await waitFor(async () => (await cursor("inventory"))!.appliedSequence > before, { what: "incomplete inventory applied" });
    const during = await getNode();
    expect(during.gpus.filter((g) => g.state === GpuState.PRESENT)).toHaveLength(2);
    expect(during.gpus.filter((g) => g.state === GpuState.MISSING)).toHaveLength(1);

    // The inventory back before the exit status: no collection reads an empty one with exit 0.
    put("inventory.csv", readFileSync(join(fixture, "inventory.csv"), "utf8"));
    rmSync(join(gpuDir, "stderr"));
    rmSync(join(gpuDir, "exit_code"));
    await waitFor(async () => (await getNode()).gpus.every((g) => g.state === GpuState.PRESENT), { what: "GPU returned" });
    expect((await actions()).some((e) => e.action === "gpu.returned")).toBe(true);
  });

  it("goes stale, then offline, when the agent dies; both audited", async () => {
    await agent!.kill();
    await reconcile(1_001); // silent for longer than the stale threshold
    await moved("online", "stale");
    expect((await getNode()).node?.liveness).toBe(Liveness.STALE);
    await reconcile(1_000); // ... and longer than the offline threshold
    await moved("stale", "offline");
    expect((await getNode()).node?.liveness).toBe(Liveness.OFFLINE);
    const mine = (await actions()).filter((e) => e.targetId === node.nodeId).map((e) => e.action);
    expect(["node.online", "node.stale", "node.offline"].every((a) => mine.includes(a))).toBe(true);
  });

  it("comes back online on the same identity, its sequences continuing", async () => {
    const before = (await cursor("telemetry"))!.sequence;
    start();
    await waitFor(async () => (await getNode()).node?.liveness === Liveness.ONLINE, { what: "online again" });
    await waitFor(async () => (await cursor("telemetry"))!.sequence > before, { what: "sequence continues" });
    const n = await getNode();
    expect(n.node?.id).toBe(node.nodeId);
    expect(await ts.server.db.prisma.node.count()).toBe(1);
    // The return is audited by the reconciler once the heartbeat is persisted.
    const onlineAudits = async () => (await actions()).filter((e) => e.targetId === node.nodeId && e.action === "node.online").length;
    await reconcile();
    await moved("offline", "online");
    expect(await onlineAudits()).toBeGreaterThanOrEqual(2);
  });

  it("refuses a replayed sample with 409, on the unary path as on the stream", async () => {
    const c = (await cursor("telemetry"))!;
    const client = await node.client();
    const err = await client.putTelemetry({ report: { sequence: c.sequence, observedAt: timestampFromMs(Date.now()) } }).then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(err).toBeInstanceOf(ConnectError);
    expect((err as ConnectError).code).toBe(Code.Aborted);
    const state = await node.state();
    const res = await postJson(
      `${ts.url}/modelforge.agent.v1.AgentService/PutInventory`,
      ts.caPem,
      { report: { sequence: "1", observedAt: new Date().toISOString(), gpuCollectionComplete: true } },
      {},
      { certPem: state.certPem, keyPem: state.keyPem },
    );
    expect(res.status).toBe(409);
    expect((res.body as { code: string }).code).toBe("aborted");
  });

  it("an agent clock an hour ahead or behind advances the cursor but leaves last-good state, with the reason visible", async () => {
    await agent!.stop();
    const goodObserved = timestampMs((await getNode()).telemetry!.observedAt!);
    for (const [offset, pattern] of [
      ["1h", /ahead of the server clock/],
      ["-1h", /older than the last applied/],
    ] as const) {
      const seqBefore = (await cursor("telemetry"))!.sequence;
      start({ MODELFORGE_AGENT_CLOCK_OFFSET: offset });
      const c = await waitFor(
        async () => {
          const cur = (await cursor("telemetry"))!;
          return cur.sequence > seqBefore && pattern.test(cur.rejectionReason) ? cur : undefined;
        },
        { what: `rejection for clock ${offset}` },
      );
      expect(c.appliedSequence).toBeLessThanOrEqual(seqBefore);
      const n = await getNode();
      expect(timestampMs(n.telemetry!.observedAt!)).toBe(goodObserved);
      // Liveness runs on the server's clock: the skewed node is still online.
      expect(n.node?.liveness).toBe(Liveness.ONLINE);
      await agent!.stop();
    }
    start();
    await waitFor(async () => (await cursor("telemetry"))!.rejectionReason === "", { what: "reason cleared" });
    expect(timestampMs((await getNode()).telemetry!.observedAt!)).toBeGreaterThan(goodObserved);
  }, 120_000); // three agent processes start, each in seconds on a busy machine

  it("never audits telemetry, and logs no sample body", async () => {
    const mine = (await actions()).filter((e) => e.targetId === node.nodeId || e.details.nodeId === node.nodeId);
    expect(mine.every((e) => !e.action.startsWith("telemetry"))).toBe(true);
    expect(ts.logs()).not.toMatch(/utilization|memoryUsedBytes|A100-SXM4/);
  });
});

describe("session protocol", () => {
  it("refuses an incompatible protocol version with aborted, naming the accepted versions", async () => {
    const other = await enrollTestNode(ts, "old-agent");
    const client = await other.client();
    const hold = holdOpen();
    const outbound = (async function* () {
      yield { messageId: 1n, message: { case: "hello" as const, value: { protocolVersion: 99, agentVersion: "ancient" } } };
      await hold.held;
    })();
    const err = await (async () => {
      for await (const _ of client.session(outbound)) return undefined;
    })().then(
      () => undefined,
      (e: unknown) => e,
    );
    hold.release();
    expect(err).toBeInstanceOf(ConnectError);
    expect((err as ConnectError).code).toBe(Code.Aborted);
    expect((err as ConnectError).rawMessage).toBe("protocol version 99 is not supported; this server accepts 1");
  });

  it("answers pipelined messages strictly in order, a slow or refused one holding back the rest", async () => {
    const other = await enrollTestNode(ts, "pipelining-agent");
    const client = await other.client();
    const telemetry = (messageId: bigint) => ({
      messageId,
      message: { case: "telemetry" as const, value: { report: { sequence: 1n, observedAt: timestampFromMs(Date.now()) } } },
    });
    const heartbeat = (messageId: bigint) => ({ messageId, message: { case: "heartbeat" as const, value: {} } });
    const hold = holdOpen();
    const outbound = (async function* () {
      yield { messageId: 1n, message: { case: "hello" as const, value: { protocolVersion: 1, agentVersion: "test" } } };
      // Sent together: telemetry needs the database, heartbeats do not, a replay is refused.
      yield heartbeat(2n);
      yield telemetry(3n);
      yield heartbeat(4n);
      yield telemetry(5n);
      yield heartbeat(6n);
      await hold.held;
    })();
    const replies: string[] = [];
    let welcomed = false;
    for await (const res of client.session(outbound)) {
      if (res.message.case === "welcome") welcomed = true;
      if (res.message.case !== "reply") continue;
      const { messageId, result } = res.message.value;
      if (result.case === "heartbeat") {
        // The server's clock only: configuration came in Welcome.
        expect(Math.abs(timestampMs(result.value.serverTime!) - Date.now())).toBeLessThan(5_000);
        expect(result.value.config).toBeUndefined();
      }
      replies.push(`${messageId}:${result.case === "error" ? result.value.code : result.case}`);
      if (replies.length === 5) break;
    }
    hold.release();
    expect(welcomed).toBe(true);
    expect(replies).toEqual(["2:heartbeat", "3:telemetry", "4:heartbeat", "5:aborted", "6:heartbeat"]);
  });

  it("logs an open at info when the node said something new, a plain reconnect and every close at debug", async () => {
    const other = await enrollTestNode(ts, "reconnecting-agent");
    const client = await other.client();
    /** One session: Hello, Welcome, then the agent ends its side and the server its own. */
    const openOnce = async (version: string) => {
      const outbound = (async function* () {
        yield { messageId: 1n, message: { case: "hello" as const, value: { protocolVersion: 1, agentVersion: version } } };
      })();
      const seen: string[] = [];
      for await (const res of client.session(outbound)) seen.push(res.message.case ?? "");
      expect(seen).toEqual(["welcome"]);
    };
    await openOnce(agentVersion);
    await openOnce(agentVersion);
    await openOnce(`${agentVersion}+rebuilt`);
    const lines = (msg: string) =>
      ts
        .logs()
        .split("\n")
        .filter((l) => l.includes(`"nodeId":"${other.nodeId}"`) && l.includes(`"msg":"${msg}"`))
        .map((l) => (JSON.parse(l) as { level: number }).level);
    await waitFor(() => lines("session closed").length === 3, {
      on: ts.logFeed,
      what: () => `three sessions closed, seen ${lines("session closed").length}`,
    });
    // pino's levels: 30 info, 20 debug.
    expect(lines("session opened")).toEqual([30, 20, 30]);
    expect(lines("session closed")).toEqual([20, 20, 20]);
  });

  it("refuses a session that does not start with hello", async () => {
    const other = await enrollTestNode(ts, "rude-agent");
    const client = await other.client();
    const outbound = (async function* () {
      yield { messageId: 1n, message: { case: "heartbeat" as const, value: {} } };
    })();
    const err = await (async () => {
      for await (const _ of client.session(outbound)) return undefined;
    })().then(
      () => undefined,
      (e: unknown) => e,
    );
    expect((err as ConnectError).code).toBe(Code.InvalidArgument);
  });
});

describe("the gRPC Session on the raw HTTP/2 stream", () => {
  /**
   * Writes `first` on a Session stream, then `afterWelcome` once the first message came back, and
   * returns what came back: message count and status.
   */
  async function rawSession(tls: { cert?: string; key?: string }, first: Buffer, afterWelcome?: Buffer) {
    const session = http2.connect(ts.url, { ca: ts.caPem, ...tls });
    try {
      const stream = session.request({
        ":method": "POST",
        ":path": "/modelforge.agent.v1.AgentService/Session",
        "content-type": "application/grpc",
        te: "trailers",
      });
      let messages = 0;
      let status: { code?: string; message?: string } = {};
      const read = (h: Record<string, unknown>) => {
        if (h["grpc-status"] !== undefined)
          status = { code: String(h["grpc-status"]), message: decodeURIComponent(String(h["grpc-message"] ?? "")) };
      };
      stream.on("response", read);
      stream.on("trailers", read);
      stream.on("data", () => {
        if (messages++ === 0 && afterWelcome !== undefined) stream.write(afterWelcome);
      });
      stream.write(first);
      await new Promise<void>((resolve) => stream.on("close", () => resolve()));
      return { messages, ...status };
    } finally {
      session.close();
    }
  }
  /** One agent message, length-prefixed as gRPC sends it. */
  const requestFrame = (messageId: bigint, message: MessageInitShape<typeof SessionRequestSchema>["message"]) =>
    frame(toBinary(SessionRequestSchema, create(SessionRequestSchema, { messageId, message })));
  const helloFrame = () => requestFrame(1n, { case: "hello", value: { protocolVersion: 1, agentVersion: "raw" } });

  it("refuses a Session without a client certificate, in a trailers-only response", async () => {
    const res = await rawSession({}, helloFrame());
    expect(res).toEqual({ messages: 0, code: String(Code.Unauthenticated), message: "client certificate required" });
  });

  it("ends a Session that sends an oversized or malformed message, after its Welcome", async () => {
    const s = await (await enrollTestNode(ts, "raw-client")).state();
    const tls = { cert: s.certPem, key: s.keyPem };
    const oversized = Buffer.alloc(5);
    oversized.writeUInt32BE(64 * 1024 * 1024, 1);
    const big = await rawSession(tls, helloFrame(), oversized);
    expect(big).toEqual({
      messages: 1,
      code: String(Code.ResourceExhausted),
      message: expect.stringMatching(/^message of 67108864 bytes is over the limit of \d+ bytes/),
    });
    // A frame whose protobuf cannot be parsed (field 0 does not exist).
    const garbage = await rawSession(tls, helloFrame(), Buffer.from([0, 0, 0, 0, 4, 0xff, 0xff, 0xff, 0xff]));
    expect(garbage).toEqual({ messages: 1, code: String(Code.InvalidArgument), message: "malformed message" });
  });

  it("refuses an agent that piles up messages while its session is still opening", async () => {
    const s = await (await enrollTestNode(ts, "flooding-client")).state();
    const beats = Array.from({ length: 3000 }, (_, i) => requestFrame(BigInt(i + 2), { case: "heartbeat", value: {} }));
    // Sent with Hello in one write: they all arrive before the session's database work is done.
    const res = await rawSession({ cert: s.certPem, key: s.keyPem }, Buffer.concat([helloFrame(), ...beats]));
    expect(res).toEqual({ messages: 0, code: String(Code.ResourceExhausted), message: "more than 1000 messages waiting for an answer" });
  });
});

describe("graceful shutdown", () => {
  it("ends open sessions with unavailable and stops promptly", async () => {
    const own = await startTestServer();
    const other = await enrollTestNode(own, "draining");
    const client = await other.client();
    const hold = holdOpen();
    const outbound = (async function* () {
      yield { messageId: 1n, message: { case: "hello" as const, value: { protocolVersion: 1, agentVersion: "test" } } };
      await hold.held;
    })();
    const stream = client.session(outbound)[Symbol.asyncIterator]();
    expect((await stream.next()).value?.message.case).toBe("welcome");
    const started = Date.now();
    const stopping = own.stop();
    const end = await stream.next().then(
      () => undefined,
      (e: unknown) => e,
    );
    await stopping;
    hold.release();
    // The agent would have held its side open for good: the server ended it, promptly.
    expect(Date.now() - started).toBeLessThan(8_000);
    expect(end).toBeInstanceOf(ConnectError);
    expect((end as ConnectError).code).toBe(Code.Unavailable);
  });
});

describe("Session over the Connect protocol", () => {
  it("works through Connect as well as through the gRPC fast path", async () => {
    const { createClient } = await import("@connectrpc/connect");
    const { createConnectTransport } = await import("@connectrpc/connect-node");
    const { AgentService } = await import("../../gen/proto/modelforge/agent/v1/agent_pb.js");
    const other = await enrollTestNode(ts, "connect-protocol");
    const s = await other.state();
    const client = createClient(
      AgentService,
      createConnectTransport({ baseUrl: ts.url, httpVersion: "2", nodeOptions: { ca: s.caPem, cert: s.certPem, key: s.keyPem } }),
    );
    const outbound = (async function* () {
      yield { messageId: 1n, message: { case: "hello" as const, value: { protocolVersion: 1, agentVersion: "connect" } } };
      yield { messageId: 2n, message: { case: "heartbeat" as const, value: {} } };
    })();
    const seen: string[] = [];
    for await (const res of client.session(outbound)) {
      seen.push(res.message.case ?? "");
      if (res.message.case === "reply") {
        expect(res.message.value.messageId).toBe(2n);
        expect(res.message.value.result.case).toBe("heartbeat");
      }
    }
    expect(seen).toEqual(["welcome", "reply"]);
  });

  it("runs a real agent's Session through Connect's client with the agent's fast path off, and refuses a bad switch", async () => {
    const other = await enrollTestNode(ts, "agent-generic-path");
    const proc = spawnAgent(other.statePath, { FAKE_NVIDIA_SMI_DIR: gpuDir, MODELFORGE_AGENT_SESSION_FAST_PATH: "off" });
    try {
      await waitFor(
        async () => ((await ts.admin.getNode({ nodeId: other.nodeId })).node?.liveness === Liveness.ONLINE ? true : undefined),
        { what: "the node online through the agent's Connect client" },
      );
    } finally {
      await proc.stop();
    }
    const refused = spawnAgent(other.statePath, { MODELFORGE_AGENT_SESSION_FAST_PATH: "maybe" });
    const [code] = (await once(refused.child, "exit")) as [number | null];
    expect(code).toBe(1);
    expect(refused.output()).toContain('MODELFORGE_AGENT_SESSION_FAST_PATH: expected on or off, got "maybe"');
  });

  it("serves a real agent's gRPC Session through Connect's generic path with the fast path off", async () => {
    const generic = await startTestServer({ MODELFORGE_SESSION_FAST_PATH: "off", MODELFORGE_HEARTBEAT_INTERVAL: "200ms" });
    try {
      const other = await enrollTestNode(generic, "generic-path");
      const proc = spawnAgent(other.statePath, { FAKE_NVIDIA_SMI_DIR: gpuDir });
      try {
        // Heartbeats (the wire codec's shape) answered and flushed: the node goes online.
        await waitFor(
          async () => ((await generic.admin.getNode({ nodeId: other.nodeId })).node?.liveness === Liveness.ONLINE ? true : undefined),
          {
            what: "the node online through the generic path",
          },
        );
        expect(generic.logs()).toContain("gRPC Sessions served by Connect's generic path");
      } finally {
        await proc.stop();
      }
    } finally {
      await generic.stop();
    }
  });
});
